/**
 * agent-outbox/langchain — LangChain.js / LangGraph.js (`@langchain/core` 1) tools whose side
 * effects go through the outbox. Needs the optional peers `@langchain/core` and `zod` (4).
 * @packageDocumentation
 */
import { tool, type StructuredToolInterface } from '@langchain/core/tools';
import type { z } from 'zod';
import {
  createEffectStatusCall,
  type EffectStatusToolOptions,
} from '../agent/effect-status-call.js';
import { createToolCall, type OutboxToolDefinition } from '../agent/tool-call.js';
import { toJsonAnswer } from '../agent/tool-result.js';

export * from '../agent/framework-neutral.js';

/** What LangChain hands a tool beside its input: a run config (`toolCall`) or a `ToolRuntime`. */
interface ToolCallConfig {
  toolCall?: { id?: string };
  toolCallId?: string;
}

/** The tool call's id: `config.toolCall.id` (ToolNode, `invoke(toolCall)`), `runtime.toolCallId`. */
function langChainCallId(config: ToolCallConfig | undefined): string | undefined {
  const id = config?.toolCall?.id ?? config?.toolCallId;
  return typeof id === 'string' && id.length > 0 ? id : undefined;
}

/**
 * A LangChain `tool()` from an outbox tool definition (the fields of `outboxTool`), for
 * `model.bindTools()`, LangGraph's `ToolNode` or `createReactAgent`: each call runs the handler
 * in one transaction with the same idempotency key, dedupe key, approval and span behaviour as
 * the Claude helper. The tool message is one JSON object as text: `ok`, `deduped`, `result`,
 * `queued` (topic, messageId, awaitingApproval) or `error`, and `summary`, a sentence saying
 * what happened and whether calling again is useful. A failed call answers `ok: false` rather
 * than throwing, so the model reads that nothing was saved. Without an `idempotency_key` in the
 * input, the tool call's id is the key: a LangGraph node re-run from its checkpoint (after a
 * crash, or a resumed interrupt) is answered from the first run.
 *
 * @example
 * ```ts
 * const agent = createReactAgent({ llm: model, tools: [langChainTool(refundOrder)] });
 * await agent.invoke({ messages: [{ role: 'user', content: 'Refund order 42' }] });
 * ```
 */
export function langChainTool<Shape extends z.ZodRawShape, Trx, Result>(
  definition: OutboxToolDefinition<Shape, Trx, Result>,
): StructuredToolInterface {
  const call = createToolCall(definition);
  return tool(
    async (input: Record<string, unknown>, config?: ToolCallConfig) =>
      JSON.stringify(toJsonAnswer(await call.call(input, undefined, langChainCallId(config)))),
    { name: call.name, description: call.description, schema: call.schema },
  ) as unknown as StructuredToolInterface;
}

/**
 * The effect status tool (see `effectStatusTool` of `agent-outbox/agent`) as a LangChain tool,
 * named `effect_status` unless `name` says otherwise. A function `tenantId` gets the run's
 * `configurable` (`invoke(input, { configurable })`) as `meta`.
 */
export function langChainEffectStatusTool<Trx>(
  options: EffectStatusToolOptions<Trx>,
): StructuredToolInterface {
  const status = createEffectStatusCall(options);
  return tool(
    async (input: Record<string, unknown>, config?: { configurable?: unknown }) =>
      JSON.stringify(toJsonAnswer(await status.call(input, config?.configurable))),
    { name: status.name, description: status.description, schema: status.schema },
  ) as unknown as StructuredToolInterface;
}
