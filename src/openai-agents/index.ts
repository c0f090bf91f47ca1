/**
 * agent-outbox/openai-agents — OpenAI Agents SDK (`@openai/agents` 0.20) tools whose side effects
 * go through the outbox. Needs the optional peers `@openai/agents` and `zod` (4).
 * @packageDocumentation
 */
import { tool, type FunctionTool } from '@openai/agents';
import { z } from 'zod';
import {
  createEffectStatusCall,
  type EffectStatusToolOptions,
} from '../agent/effect-status-call.js';
import { createToolCall, type OutboxToolDefinition } from '../agent/tool-call.js';
import { failedResult, toJsonAnswer, type ToolAnswer } from '../agent/tool-result.js';

export * from '../agent/framework-neutral.js';

/**
 * The SDK sends zod tools in strict mode, where every field is required and an optional one
 * becomes "or null": the model sends `null` for a field it leaves out, which the field's own
 * schema would refuse. So the model sees each optional field as nullable, and before the call
 * the nulls of those fields are dropped and the input is parsed again with the definition's own
 * schema — the handler gets exactly what the other adapters give it.
 */
function strictCompatible(shape: z.ZodRawShape) {
  const optional = Object.keys(shape).filter(
    (key) => (shape[key] as z.ZodType).safeParse(undefined).success,
  );
  const lenient: Record<string, z.ZodType> = { ...(shape as Record<string, z.ZodType>) };
  for (const key of optional) lenient[key] = lenient[key]!.nullable();
  const withoutNulls = (input: Record<string, unknown>) => {
    const copy = { ...input };
    for (const key of optional) if (copy[key] === null) delete copy[key];
    return copy;
  };
  return { parameters: z.object(lenient), withoutNulls };
}

/** Parses the model's input with the definition's schema and runs the call, as JSON text. */
async function answered(
  schema: z.ZodType,
  input: Record<string, unknown>,
  run: (args: Record<string, unknown>) => Promise<ToolAnswer>,
): Promise<string> {
  const parsed = schema.safeParse(input);
  if (!parsed.success)
    return JSON.stringify(
      toJsonAnswer(failedResult(new Error(z.prettifyError(parsed.error)), false)),
    );
  return JSON.stringify(toJsonAnswer(await run(parsed.data as Record<string, unknown>)));
}

/**
 * An OpenAI Agents SDK function `tool()` from an outbox tool definition (the fields of
 * `outboxTool`): each call runs the handler in one transaction with the same idempotency key,
 * dedupe key, approval and span behaviour as the Claude helper. The tool's output is one JSON
 * object as text: `ok`, `deduped`, `result`, `queued` (topic, messageId, awaitingApproval) or
 * `error`, and `summary`, a sentence saying what happened and whether calling again is useful.
 * A failed call answers `ok: false` rather than throwing, so the model reads that nothing was
 * saved. Without an `idempotency_key` in the input, the call's `callId` is the key: a run resumed
 * from a `RunState` saved before the tool committed is answered from the first run.
 *
 * @example
 * ```ts
 * const agent = new Agent({ name: 'shop', instructions, tools: [openAiAgentsTool(refundOrder)] });
 * const result = await run(agent, 'Refund order 42');
 * ```
 */
export function openAiAgentsTool<Shape extends z.ZodRawShape, Trx, Result>(
  definition: OutboxToolDefinition<Shape, Trx, Result>,
): FunctionTool {
  const call = createToolCall(definition);
  const { parameters, withoutNulls } = strictCompatible(call.shape);
  return tool({
    name: call.name,
    description: call.description,
    parameters,
    execute: (input, _runContext, details) =>
      answered(call.schema, withoutNulls(input as Record<string, unknown>), (args) =>
        call.call(args, undefined, details?.toolCall?.callId),
      ),
  }) as unknown as FunctionTool;
}

/**
 * The effect status tool (see `effectStatusTool` of `agent-outbox/agent`) as an OpenAI Agents
 * SDK tool, named `effect_status` unless `name` says otherwise. A function `tenantId` gets the
 * run's context (`run(agent, input, { context })`) as `meta`.
 */
export function openAiAgentsEffectStatusTool<Trx>(
  options: EffectStatusToolOptions<Trx>,
): FunctionTool {
  const status = createEffectStatusCall(options);
  const { parameters, withoutNulls } = strictCompatible(status.shape);
  return tool({
    name: status.name,
    description: status.description,
    parameters,
    execute: (input, runContext) =>
      answered(status.schema, withoutNulls(input as Record<string, unknown>), (args) =>
        status.call(args, runContext?.context),
      ),
  }) as unknown as FunctionTool;
}
