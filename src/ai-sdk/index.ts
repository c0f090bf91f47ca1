/**
 * agent-outbox/ai-sdk — Vercel AI SDK (`ai` 6) tools whose side effects go through the outbox.
 * Needs the optional peers `ai` and `zod` (4).
 * @packageDocumentation
 */
import { tool, type ModelMessage, type Tool, type ToolModelMessage } from 'ai';
import type { z } from 'zod';
import { callApprovalsOf, denialReason } from '../admin/call-approvals.js';
import {
  createEffectStatusCall,
  type EffectStatusToolOptions,
} from '../agent/effect-status-call.js';
import {
  createToolCall,
  type AdapterOptions,
  type OutboxToolDefinition,
} from '../agent/tool-call.js';
import { toJsonAnswer } from '../agent/tool-result.js';
import type { SqlExecutor } from '../store/sql-executor.js';

export * from '../agent/framework-neutral.js';

/** Options of {@link aiSdkTool}. */
export interface AiSdkToolOptions extends AdapterOptions {
  /**
   * With `approval: 'call'`: your reference of the saved conversation, from the call's
   * `experimental_context`, kept with the approval request and handed to the callback of
   * `watchCallApprovals` (e.g. `(context) => context.conversationId`).
   */
  stateRef?: (experimentalContext: unknown) => string | undefined;
}

/**
 * An AI SDK `tool()` from an outbox tool definition (the fields of `outboxTool`): each call runs
 * the handler in one transaction with the same idempotency key, dedupe key, approval and span
 * behaviour as the Claude helper. The model gets one JSON object: `ok`, `deduped`, `result`,
 * `queued` (topic, messageId, awaitingApproval) or `error`, and `summary`, a sentence saying what
 * happened and whether calling again is useful. A failed call answers `ok: false` rather than
 * throwing, so the model reads that nothing was saved. The tool's key in `tools` should be the
 * definition's `name` (the idempotency keys are stored under it). Without an `idempotency_key` in
 * the input, the call's `toolCallId` is the key: an approved call that the SDK runs again from
 * the saved messages (its result lost in a crash) is answered from the first run.
 *
 * With `{ approval: 'call' }` the tool has `needsApproval`: a call whose effect the definition's
 * approval policy would hold is paused by the SDK (a `tool-approval-request` part) and recorded in
 * the outbox for a person; answer it with {@link aiSdkApprovalResponses} once decided.
 *
 * @example
 * ```ts
 * const result = await generateText({
 *   model,
 *   tools: { refund_order: aiSdkTool(refundOrder) },
 *   stopWhen: stepCountIs(5),
 *   prompt: 'Refund order 42',
 * });
 * ```
 */
export function aiSdkTool<Shape extends z.ZodRawShape, Trx, Result>(
  definition: OutboxToolDefinition<Shape, Trx, Result>,
  options: AiSdkToolOptions = {},
): Tool<Record<string, unknown>, Record<string, unknown>> {
  const call = createToolCall(definition, options);
  return tool({
    description: call.description,
    inputSchema: call.schema as z.ZodType<Record<string, unknown>>,
    ...(call.approvalMode === 'call'
      ? {
          needsApproval: (input: Record<string, unknown>, { toolCallId, experimental_context }) =>
            call.needsApproval(input, toolCallId, options.stateRef?.(experimental_context)),
        }
      : {}),
    execute: async (input, { toolCallId }) =>
      toJsonAnswer(await call.call(input, undefined, toolCallId)),
  });
}

/**
 * The answers to the SDK's open approval requests, from the decisions the OUTBOX recorded (a
 * person via `decideCallApproval`, `outbox approve call-<n>`, the dashboard; or an expiry): one
 * `tool` message of `tool-approval-response` parts to append to `messages` before calling
 * `generateText` again, or `undefined` while nothing is decided. A rejected or expired call is a
 * denial with its reason (the model reads it); a call still waiting is left out.
 *
 * Only the outbox approves: a response the application made up, or a history edited to say
 * "approved", runs the tool, but the tool then writes what the policy holds HELD.
 *
 * @example
 * ```ts
 * const answers = await aiSdkApprovalResponses(fromPg(pool), messages);
 * if (answers) await generateText({ model, tools, messages: [...messages, answers] });
 * ```
 */
export async function aiSdkApprovalResponses(
  executor: SqlExecutor,
  messages: readonly ModelMessage[],
  options: { schema?: string } = {},
): Promise<ToolModelMessage | undefined> {
  const toolNames = new Map<string, string>();
  const requests = new Map<string, string>(); // approvalId → toolCallId
  const answered = new Set<string>();
  for (const message of messages) {
    if (typeof message.content === 'string') continue;
    for (const part of message.content as { type: string }[]) {
      const p = part as {
        type: string;
        toolCallId?: string;
        toolName?: string;
        approvalId?: string;
      };
      if (p.type === 'tool-call' && p.toolCallId && p.toolName)
        toolNames.set(p.toolCallId, p.toolName);
      else if (p.type === 'tool-approval-request' && p.approvalId && p.toolCallId)
        requests.set(p.approvalId, p.toolCallId);
      else if (p.type === 'tool-approval-response' && p.approvalId) answered.add(p.approvalId);
    }
  }
  const open = [...requests].filter(([approvalId]) => !answered.has(approvalId));
  const calls = open.flatMap(([approvalId, toolCallId]) => {
    const toolName = toolNames.get(toolCallId);
    return toolName ? [{ approvalId, tool: toolName, callId: toolCallId }] : [];
  });
  const decided = await callApprovalsOf(executor, calls, options);
  const parts = calls.flatMap((c) => {
    const approval = decided.find((a) => a.tool === c.tool && a.callId === c.callId);
    if (!approval || approval.state === 'awaiting') return [];
    const reason = denialReason(approval) ?? approval.reason ?? undefined;
    return [
      {
        type: 'tool-approval-response' as const,
        approvalId: c.approvalId,
        approved: approval.state === 'approved',
        ...(reason ? { reason } : {}),
      },
    ];
  });
  return parts.length ? { role: 'tool', content: parts } : undefined;
}

/**
 * The effect status tool (see `effectStatusTool` of `agent-outbox/agent`) as an AI SDK tool:
 * register it as `tools: { effect_status: aiSdkEffectStatusTool({ transactions }) }`. A function
 * `tenantId` gets the call's `experimental_context` as `meta`.
 */
export function aiSdkEffectStatusTool<Trx>(
  options: EffectStatusToolOptions<Trx>,
): Tool<Record<string, unknown>, Record<string, unknown>> {
  const status = createEffectStatusCall(options);
  return tool({
    description: status.description,
    inputSchema: status.schema as z.ZodType<Record<string, unknown>>,
    execute: async (input, { experimental_context }) =>
      toJsonAnswer(await status.call(input, experimental_context)),
  });
}
