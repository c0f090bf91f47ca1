/**
 * agent-outbox/ai-sdk — Vercel AI SDK (`ai` 6) tools whose side effects go through the outbox.
 * Needs the optional peers `ai` and `zod` (4).
 * @packageDocumentation
 */
import { tool, type Tool } from 'ai';
import type { z } from 'zod';
import {
  createEffectStatusCall,
  type EffectStatusToolOptions,
} from '../agent/effect-status-call.js';
import { createToolCall, type OutboxToolDefinition } from '../agent/tool-call.js';
import { toJsonAnswer } from '../agent/tool-result.js';

export * from '../agent/framework-neutral.js';

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
): Tool<Record<string, unknown>, Record<string, unknown>> {
  const call = createToolCall(definition);
  return tool({
    description: call.description,
    inputSchema: call.schema as z.ZodType<Record<string, unknown>>,
    execute: async (input, { toolCallId }) =>
      toJsonAnswer(await call.call(input, undefined, toolCallId)),
  });
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
