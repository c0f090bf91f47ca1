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
import {
  createToolCall,
  type AdapterOptions,
  type OutboxToolDefinition,
} from '../agent/tool-call.js';
import { toJsonAnswer } from '../agent/tool-result.js';

export * from '../agent/framework-neutral.js';

/** What LangChain hands a tool beside its input: a run config (`toolCall`) or a `ToolRuntime`. */
interface ToolCallConfig {
  toolCall?: { id?: string };
  toolCallId?: string;
  configurable?: { thread_id?: unknown };
}

/** What the graph is interrupted with when a call waits for a person (`approval: 'call'`). */
export interface OutboxCallInterrupt {
  type: 'outbox-call-approval';
  /** `call-<n>`: decide it with `decideCallApproval` or `outbox approve call-<n>`. */
  approvalId: string;
  tool: string;
  callId: string;
  input: unknown;
  /** The thread (or your `stateRef`) to resume. */
  stateRef: string | null;
}

/** Options of {@link langChainTool}. */
export interface LangChainToolOptions extends AdapterOptions {
  /**
   * With `approval: 'call'`: LangGraph's `interrupt` (from `@langchain/langgraph`), which pauses
   * the graph at this tool until it is resumed (`new Command({ resume })`). Passed in rather than
   * imported, so this adapter needs only `@langchain/core`. Required with `approval: 'call'`.
   */
  interrupt?: (value: OutboxCallInterrupt) => unknown;
  /**
   * Your reference of the saved run, from the tool's config; default the checkpointer's
   * `configurable.thread_id`. Kept with the request, handed to `watchCallApprovals`' callback.
   */
  stateRef?: (config: unknown) => string | undefined;
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
 * With `{ approval: 'call', interrupt }` (LangGraph's human-in-the-loop): a call whose effect the
 * definition's approval policy would hold is recorded in the outbox for a person and interrupts
 * the graph (`OutboxCallInterrupt`); resume the thread (`new Command({ resume: approvalId })`)
 * once decided. LangGraph runs the tool again from its first line on resume; the tool then asks
 * the OUTBOX, not the resume value: approved → written unheld, once; rejected or expired → nothing
 * written, the model reads why; still undecided → written held.
 *
 * @example
 * ```ts
 * const agent = createReactAgent({ llm: model, tools: [langChainTool(refundOrder)] });
 * await agent.invoke({ messages: [{ role: 'user', content: 'Refund order 42' }] });
 * ```
 */
export function langChainTool<Shape extends z.ZodRawShape, Trx, Result>(
  definition: OutboxToolDefinition<Shape, Trx, Result>,
  options: LangChainToolOptions = {},
): StructuredToolInterface {
  const call = createToolCall(definition, options);
  if (call.approvalMode === 'call' && typeof options.interrupt !== 'function')
    throw new Error(
      `agent-outbox: langChainTool ${definition.name}: approval 'call' needs LangGraph's interrupt: langChainTool(def, { approval: 'call', interrupt }) with interrupt from @langchain/langgraph`,
    );
  return tool(
    async (input: Record<string, unknown>, config?: ToolCallConfig) => {
      const callId = langChainCallId(config);
      if (call.approvalMode === 'call' && callId) {
        const thread = config?.configurable?.thread_id;
        const ref = options.stateRef
          ? options.stateRef(config)
          : typeof thread === 'string'
            ? thread
            : undefined;
        if (await call.needsApproval(input, callId, ref)) {
          const approval = await call.approvalOf(callId);
          // Undecided: pause the graph (throws on the first run; returns the resume value on
          // the next). Decided or resumed: the outbox decides what the call writes.
          if (approval?.state === 'awaiting')
            options.interrupt!({
              type: 'outbox-call-approval',
              approvalId: approval.approvalId,
              tool: call.name,
              callId,
              input: approval.input,
              stateRef: approval.stateRef,
            });
        }
      }
      return JSON.stringify(toJsonAnswer(await call.call(input, undefined, callId)));
    },
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
