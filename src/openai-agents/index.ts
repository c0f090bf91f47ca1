/**
 * agent-outbox/openai-agents — OpenAI Agents SDK (`@openai/agents` 0.20) tools whose side effects
 * go through the outbox. Needs the optional peers `@openai/agents` and `zod` (4).
 * @packageDocumentation
 */
import { tool, type FunctionTool, type RunState } from '@openai/agents';
import { z } from 'zod';
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
import { failedResult, toJsonAnswer, type ToolAnswer } from '../agent/tool-result.js';
import type { SqlExecutor } from '../store/sql-executor.js';

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

/** Options of {@link openAiAgentsTool}. */
export interface OpenAiAgentsToolOptions extends AdapterOptions {
  /**
   * With `approval: 'call'`: your reference of the saved run (where you store
   * `result.state.toString()`), from the run's context (`run(agent, input, { context })`), kept
   * with the approval request and handed to the callback of `watchCallApprovals`.
   */
  stateRef?: (context: unknown) => string | undefined;
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
 * With `{ approval: 'call' }` the tool has `needsApproval`: a call whose effect the definition's
 * approval policy would hold interrupts the run (`result.interruptions`) and is recorded in the
 * outbox for a person; once decided, {@link openAiAgentsApplyDecisions} approves or rejects the
 * saved `RunState` from the outbox, and `run(agent, state)` goes on.
 *
 * @example
 * ```ts
 * const agent = new Agent({ name: 'shop', instructions, tools: [openAiAgentsTool(refundOrder)] });
 * const result = await run(agent, 'Refund order 42');
 * ```
 */
export function openAiAgentsTool<Shape extends z.ZodRawShape, Trx, Result>(
  definition: OutboxToolDefinition<Shape, Trx, Result>,
  options: OpenAiAgentsToolOptions = {},
): FunctionTool {
  const call = createToolCall(definition, options);
  const { parameters, withoutNulls } = strictCompatible(call.shape);
  // Input the model got wrong is refused when the call runs, not paused.
  const needsApproval = async (
    runContext: { context: unknown },
    input: unknown,
    callId?: string,
  ): Promise<boolean> => {
    const parsed = call.schema.safeParse(withoutNulls(input as Record<string, unknown>));
    if (!parsed.success || !callId) return false;
    return call.needsApproval(
      parsed.data as Record<string, unknown>,
      callId,
      options.stateRef?.(runContext.context),
    );
  };
  return tool({
    name: call.name,
    description: call.description,
    parameters,
    ...(call.approvalMode === 'call' ? { needsApproval } : {}),
    execute: (
      input: unknown,
      _runContext?: unknown,
      details?: { toolCall?: { callId?: string } },
    ) =>
      answered(call.schema, withoutNulls(input as Record<string, unknown>), (args) =>
        call.call(args, undefined, details?.toolCall?.callId),
      ),
  }) as unknown as FunctionTool;
}

/** What {@link openAiAgentsApplyDecisions} did, by call id. */
export interface AppliedDecisions {
  approved: string[];
  /** Rejected or expired: rejected in the state, with the reason as the model's message. */
  rejected: string[];
  /** Still waiting for a person (or not an outbox call): left as they are. */
  waiting: string[];
}

/**
 * Answers a saved run's interruptions from the decisions the OUTBOX recorded (a person via
 * `decideCallApproval`, `outbox approve call-<n>`, the dashboard; or an expiry): `state.approve`
 * for an approved call, `state.reject` with the reason (who refused and why, or that it expired)
 * as the model's message for a refused one. Then `run(agent, state)` continues the run.
 *
 * Only the outbox approves: a state approved by other means runs the tool, but the tool then
 * writes what the policy holds HELD.
 *
 * @example
 * ```ts
 * const state = await RunState.fromString(agent, saved);
 * const applied = await openAiAgentsApplyDecisions(fromPg(pool), state);
 * if (applied.waiting.length === 0) await run(agent, state);
 * ```
 */
export async function openAiAgentsApplyDecisions(
  executor: SqlExecutor,
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  state: RunState<any, any>,
  options: { schema?: string } = {},
): Promise<AppliedDecisions> {
  const items = state.getInterruptions().map((item) => {
    const raw = item.rawItem as { type?: string; name?: string; callId?: string };
    return { item, tool: item.toolName ?? raw.name ?? '', callId: raw.callId ?? '' };
  });
  const calls = items.filter((i) => i.tool && i.callId);
  const approvals = await callApprovalsOf(executor, calls, options);
  const applied: AppliedDecisions = { approved: [], rejected: [], waiting: [] };
  for (const { item, tool: name, callId } of items) {
    const approval = approvals.find((a) => a.tool === name && a.callId === callId);
    if (!approval || approval.state === 'awaiting') {
      applied.waiting.push(callId);
    } else if (approval.state === 'approved') {
      state.approve(item);
      applied.approved.push(callId);
    } else {
      state.reject(item, { message: `Not done: ${denialReason(approval) ?? approval.state}.` });
      applied.rejected.push(callId);
    }
  }
  return applied;
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
