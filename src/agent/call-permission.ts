import type {
  CanUseTool,
  HookCallbackMatcher,
  PermissionResult,
  PreToolUseHookInput,
  SdkMcpToolDefinition,
} from '@anthropic-ai/claude-agent-sdk';
import { denialReason, type CallApproval } from '../admin/call-approvals.js';
import { outboxCallOf } from './outbox-tool.js';
import type { OutboxToolCall } from './tool-call.js';

/** Options of {@link outboxCanUseTool} and {@link outboxApprovalHook}. */
export interface OutboxPermissionOptions {
  /** The name the tools' MCP server is registered under (`mcpServers: { shop: ... }`). */
  server: string;
  /** The outbox tools built with `outboxTool(def, { approval: 'call' })`. */
  // The SDK's own type uses `any` here: its tools differ in input shape.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  tools: readonly SdkMcpToolDefinition<any>[];
  /** Your reference of this session (its id, your request id), kept with each request. */
  stateRef?: string;
}

/** Options of {@link outboxCanUseTool}. */
export interface OutboxCanUseToolOptions extends OutboxPermissionOptions {
  /**
   * How long one permission check waits for a person's decision, in ms (default 10 minutes);
   * then the call is denied as "still waiting" (nothing done) and the model is told so. Use
   * {@link outboxApprovalHook} for waits longer than a session should stay open.
   */
  waitMs?: number;
  /** How often the outbox is read while waiting, in ms (default 1000). */
  pollMs?: number;
  /** Answers for tools that are not these outbox tools. Default: deny. */
  otherTools?: CanUseTool;
}

function resolver(options: OutboxPermissionOptions) {
  if (typeof options.server !== 'string' || options.server.length === 0)
    throw new Error('agent-outbox: give the MCP server name the outbox tools are registered under');
  const calls = new Map<string, OutboxToolCall>();
  for (const tool of options.tools) {
    const call = outboxCallOf(tool);
    if (!call)
      throw new Error(
        `agent-outbox: tool ${tool.name} was not built by outboxTool(); only outbox tools can be approved from the outbox`,
      );
    calls.set(`mcp__${options.server}__${call.name}`, call);
  }
  return (toolName: string) => calls.get(toolName);
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });

function waitingSentence(approval: CallApproval): string {
  return `This call waits for a person's approval (${approval.approvalId}); nothing was done. Tell the user it is waiting; do not call again.`;
}

/**
 * A `canUseTool` for `query()` that answers Claude's permission check of the outbox tools from
 * the OUTBOX: a call whose effect the approval policy would hold is recorded for a person
 * (`outbox approvals` lists it as `call-<n>`), and the check waits until it is decided —
 * approved: allow; rejected or expired: deny with who and why (the model reads it). A call the
 * policy would not hold is allowed at once. Claude asks only for tools NOT in `allowedTools`:
 * leave these tools out of it.
 *
 * @example
 * ```ts
 * query({ prompt, options: {
 *   mcpServers: { shop: createToolServer({ name: 'shop', tools: [refundOrder] }) },
 *   canUseTool: outboxCanUseTool({ server: 'shop', tools: [refundOrder], stateRef: request.id }),
 * } });
 * ```
 */
export function outboxCanUseTool(options: OutboxCanUseToolOptions): CanUseTool {
  const callOf = resolver(options);
  const waitMs = options.waitMs ?? 10 * 60_000;
  const pollMs = options.pollMs ?? 1000;
  return async (toolName, input, context): Promise<PermissionResult | null> => {
    const call = callOf(toolName);
    if (!call)
      return options.otherTools
        ? options.otherTools(toolName, input, context)
        : { behavior: 'deny', message: `${toolName} is not allowed here.` };
    const id = context.toolUseID;
    if (!(await call.needsApproval(input, id, options.stateRef)))
      return { behavior: 'allow', updatedInput: input };
    const deadline = Date.now() + waitMs;
    for (;;) {
      const approval = await call.approvalOf(id);
      if (!approval)
        return { behavior: 'deny', message: 'No approval was recorded for this call.' };
      if (approval.state === 'approved') return { behavior: 'allow', updatedInput: input };
      if (approval.state !== 'awaiting')
        return { behavior: 'deny', message: `Not done: ${denialReason(approval)}.` };
      if (Date.now() >= deadline || context.signal.aborted)
        return { behavior: 'deny', message: waitingSentence(approval) };
      await sleep(Math.min(pollMs, Math.max(0, deadline - Date.now())), context.signal);
    }
  };
}

/**
 * A `PreToolUse` hook for long waits: a call of the outbox tools whose effect the approval policy
 * would hold is recorded for a person and DEFERRED (`permissionDecision: 'defer'`): the session
 * ends with the call in `deferred_tool_use`. When the decision reaches your callback
 * (`watchCallApprovals`, with `stateRef`), resume the session; the hook then answers from the
 * outbox — approved: allow; rejected or expired: deny with the reason. A call the policy would
 * not hold is left to the other checks (`allowedTools`).
 */
export function outboxApprovalHook(options: OutboxPermissionOptions): HookCallbackMatcher {
  const callOf = resolver(options);
  const names = options.tools.map((tool) => `mcp__${options.server}__${outboxCallOf(tool)!.name}`);
  const escape = (name: string) => name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return {
    matcher: names.map(escape).join('|'),
    hooks: [
      async (raw) => {
        const pre = raw as PreToolUseHookInput;
        const call = pre.hook_event_name === 'PreToolUse' ? callOf(pre.tool_name) : undefined;
        if (!call) return {};
        const input = (pre.tool_input ?? {}) as Record<string, unknown>;
        if (!(await call.needsApproval(input, pre.tool_use_id, options.stateRef))) return {};
        const approval = await call.approvalOf(pre.tool_use_id);
        const decision =
          approval?.state === 'approved'
            ? ({ permissionDecision: 'allow' } as const)
            : approval?.state === 'awaiting'
              ? ({
                  permissionDecision: 'defer',
                  permissionDecisionReason: waitingSentence(approval),
                } as const)
              : ({
                  permissionDecision: 'deny',
                  permissionDecisionReason: `Not done: ${approval ? denialReason(approval) : 'no approval was recorded'}.`,
                } as const);
        return { hookSpecificOutput: { hookEventName: 'PreToolUse', ...decision } };
      },
    ],
  };
}
