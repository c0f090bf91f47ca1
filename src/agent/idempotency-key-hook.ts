import { createHash } from 'node:crypto';
import type { HookCallbackMatcher, PreToolUseHookInput } from '@anthropic-ai/claude-agent-sdk';
import { IDEMPOTENCY_KEY_FIELD } from './outbox-tool.js';

/** Options of {@link idempotencyKeyHook}. */
export interface IdempotencyKeyHookOptions {
  /**
   * Your application's id of the user request this agent run serves — the same id when the
   * request is retried (after a timeout, a crash of the loop, a re-run). Every key derives from it.
   */
  requestId: string;
  /**
   * The outbox tools whose key to set, by the names the model calls them — as in `allowedTools`:
   * `mcp__<server>__<tool>`. Other tools' input is left alone.
   */
  tools: readonly string[];
  /** Called with each key set (for logs and tests). */
  onKey?: (tool: string, key: string) => void;
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/**
 * The idempotency key of one tool call: the request id, the tool's own name, and a hash of the
 * call's arguments (the model's `idempotency_key`, if any, left out), e.g.
 * `req-42:create_order:3f1c0a9b2e7d4c15`.
 */
export function idempotencyKeyFor(requestId: string, tool: string, input: unknown): string {
  const { [IDEMPOTENCY_KEY_FIELD]: _ignored, ...args } = (input ?? {}) as Record<string, unknown>;
  const digest = createHash('sha256').update(canonicalJson(args)).digest('hex').slice(0, 16);
  return `${requestId}:${tool.replace(/^mcp__.+?__/, '')}:${digest}`.slice(0, 255);
}

/**
 * A `PreToolUse` hook for `query()` that writes the `idempotency_key` of every call of your outbox
 * tools from your application's request id, whatever key the model wrote.
 *
 * Why: the key must come from the caller, and a model cannot be trusted to copy one — it may
 * invent a fresh key on a retry, which is exactly the duplicate the key exists to stop. The same
 * call repeated for one request (a retry after a timeout, a re-run of the loop) gets the same key
 * and is answered `deduped`; a new request id is new work. The cost: two identical calls in ONE
 * request are one call — issue them under two request ids if both are meant. Permission stays
 * with `allowedTools`: the hook only edits the input (no `permissionDecision`).
 *
 * @example
 * ```ts
 * const tools = ['mcp__shop__create_order', 'mcp__shop__refund_order'];
 * query({
 *   prompt,
 *   options: {
 *     mcpServers: { shop: createToolServer({ name: 'shop', tools: [createOrder, refundOrder] }) },
 *     allowedTools: tools,
 *     hooks: { PreToolUse: [idempotencyKeyHook({ requestId: request.id, tools })] },
 *   },
 * });
 * ```
 */
export function idempotencyKeyHook(options: IdempotencyKeyHookOptions): HookCallbackMatcher {
  if (typeof options.requestId !== 'string' || options.requestId.length === 0)
    throw new Error('agent-outbox: idempotencyKeyHook needs a requestId (a non-empty string)');
  if (!Array.isArray(options.tools) || options.tools.length === 0)
    throw new Error('agent-outbox: idempotencyKeyHook needs the tools whose key it sets');
  const ours = new Set(options.tools);
  const escape = (name: string) => name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return {
    matcher: [...ours].map(escape).join('|'),
    hooks: [
      async (input) => {
        const pre = input as PreToolUseHookInput;
        if (pre.hook_event_name !== 'PreToolUse' || !ours.has(pre.tool_name)) return {};
        const key = idempotencyKeyFor(options.requestId, pre.tool_name, pre.tool_input);
        options.onKey?.(pre.tool_name, key);
        return {
          hookSpecificOutput: {
            hookEventName: 'PreToolUse',
            updatedInput: {
              ...(pre.tool_input as Record<string, unknown>),
              [IDEMPOTENCY_KEY_FIELD]: key,
            },
          },
        };
      },
    ],
  };
}
