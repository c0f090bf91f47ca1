import { tool, type SdkMcpToolDefinition } from '@anthropic-ai/claude-agent-sdk';
import { context } from '@opentelemetry/api';
import type { CallToolResult, ToolAnnotations } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { quoteIdentifier } from '../core/identifier.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { createOutbox, type OutboxWriter } from '../writer/create-outbox.js';
import { withApprovalPolicy, type ApprovalPolicy } from './approval-policy.js';
import { bindOutbox, type BoundOutbox } from './bound-outbox.js';
import { claimKeySql, priorResultSql, saveResultSql } from '../sql/tool-calls.js';
import { committedResult, dedupedResult, failedResult } from './tool-result.js';
import type { TraceContext } from './trace-context.js';
import { startToolSpan } from './tool-span.js';
import type { TransactionRunner } from './transaction-runner.js';

/** Name of the input field carrying the caller's idempotency key. */
export const IDEMPOTENCY_KEY_FIELD = 'idempotency_key';

/** Who called, for what, under which trace. */
export interface ToolCallContext extends TraceContext {
  /** The tool's name. */
  tool: string;
  /** The caller's idempotency key for this call. */
  idempotencyKey: string;
}

/**
 * What a handler gets. Deliberately no network client, no MCP request object: a handler writes
 * rows and outbox messages, and consumers perform the effects later (the lint rule
 * `agent-outbox/no-side-effects-in-tools` checks the rest).
 */
export interface ToolScope<Trx> {
  /** The transaction as a {@link SqlExecutor}. */
  tx: SqlExecutor;
  /** The same transaction as your client's own object (Kysely `Transaction`, pg client, ...). */
  trx: Trx;
  /** The writer bound to this transaction and stamped with the call's trace context. */
  outbox: BoundOutbox;
  ctx: ToolCallContext;
}

/** The handler's input: the tool's fields, parsed by zod (the idempotency key is in `ctx`). */
export type ToolInput<Shape extends z.ZodRawShape> = z.output<z.ZodObject<Shape>>;

/** Input shape the model sees: yours plus the idempotency key. */
export type WithIdempotencyKey<Shape extends z.ZodRawShape> = Shape & {
  idempotency_key: z.ZodString;
};

/** Options of {@link outboxTool}. */
export interface OutboxToolOptions<Shape extends z.ZodRawShape, Trx, Result> {
  /** Tool name the model calls, e.g. `create_order`. Also the key namespace in `outbox_tool_calls`. */
  name: string;
  /** What the tool does, for the model. */
  description: string;
  /** zod 4 fields of the input; `idempotency_key` is added and must not be among them. */
  input: Shape;
  /** Opens the transaction: {@link kyselyTransactions}, {@link pgPoolTransactions}, ... */
  transactions: TransactionRunner<Trx>;
  /** Writer to use; its schema must hold `outbox_tool_calls` too. Default `createOutbox()`. */
  outbox?: OutboxWriter;
  /**
   * Runs inside the transaction. Resolve to commit (the value, JSON-serialisable, is returned to
   * the model and stored for duplicates); throw to roll everything back.
   */
  handler: (input: ToolInput<Shape>, scope: ToolScope<Trx>) => Promise<Result>;
  /** One plain sentence about a committed result for the model, e.g. "Order 42 created." */
  summarize?: (result: Result) => string;
  /** MCP tool annotations (readOnlyHint, destructiveHint, ...). */
  annotations?: ToolAnnotations;
  /**
   * Which of the messages the handler enqueues must wait for a person's approval (issue 20):
   * `(message, input) => boolean`, e.g.
   * `(message, input) => message.topic === 'payment.refund' && input.amount > 10_000`. A held
   * message is committed with the call but never dispatched until approved (`outbox approve`);
   * the answer to the model lists it as `awaitingApproval` and says so. The policy wins over the
   * handler: a message it holds is held even if the handler set `requiresApproval: false`.
   * Held messages are marked as requested by this call (tool and idempotency key). Default: none
   * (only messages the handler writes with `requiresApproval: true`).
   */
  approval?: ApprovalPolicy<ToolInput<Shape>>;
}

/**
 * Defines a Claude Agent SDK tool whose handler runs in one database transaction and writes side
 * effects to the outbox instead of performing them.
 *
 * Per call: BEGIN; claim `(name, idempotency_key)` in `outbox_tool_calls` (a committed duplicate
 * answers `{ ok: true, deduped: true }` and writes nothing; a concurrent one waits for the first);
 * run the handler with `{ tx, trx, outbox, ctx }`; store its result; COMMIT. Any throw rolls back
 * — business rows, messages and the key — and answers `isError: true` with the error, secrets
 * redacted. Register the result with {@link createToolServer}.
 *
 * The idempotency key is an input field but must come from your application, not the model (e.g.
 * one per user request, or a PreToolUse hook that fills it): a model inventing keys defeats it.
 *
 * @example
 * ```ts
 * const createOrder = outboxTool({
 *   name: 'create_order',
 *   description: 'Creates an order; the card is charged and a receipt mailed afterwards.',
 *   input: { user_id: z.string(), amount: z.number().int().positive() },
 *   transactions: kyselyTransactions(db),
 *   handler: async (input, { trx, outbox }) => {
 *     const order = await trx.insertInto('orders').values(input).returning('id').executeTakeFirstOrThrow();
 *     await outbox.enqueue({ topic: 'payment.charge', aggregateId: `order:${order.id}`, payload: input });
 *     return { orderId: order.id };
 *   },
 * });
 * ```
 */
export function outboxTool<Shape extends z.ZodRawShape, Trx, Result>(
  options: OutboxToolOptions<Shape, Trx, Result>,
): SdkMcpToolDefinition<WithIdempotencyKey<Shape>> {
  if (IDEMPOTENCY_KEY_FIELD in options.input) {
    throw new Error(
      `agent-outbox: tool ${options.name} declares "${IDEMPOTENCY_KEY_FIELD}" itself; outboxTool adds it`,
    );
  }
  const writer = options.outbox ?? createOutbox();
  const schema = quoteIdentifier(writer.schema);
  const sql = {
    claim: claimKeySql(schema),
    prior: priorResultSql(schema),
    save: saveResultSql(schema),
  };
  const shape = {
    ...options.input,
    [IDEMPOTENCY_KEY_FIELD]: z
      .string()
      .min(1)
      .max(255)
      .describe(
        'Supplied by the application for this request; repeat it unchanged when retrying the same request.',
      ),
  } as WithIdempotencyKey<Shape>;

  // The approval policy and who asked, applied to everything the handler enqueues.
  const heldWriter = (input: Record<string, unknown>, ctx: ToolCallContext) =>
    withApprovalPolicy(
      writer,
      options.approval,
      input as ToolInput<Shape>,
      `tool ${ctx.tool} · idempotency key ${ctx.idempotencyKey}`,
    );

  async function call(args: Record<string, unknown>, extra: unknown): Promise<CallToolResult> {
    const { [IDEMPOTENCY_KEY_FIELD]: key, ...input } = args;
    // The call's span (tool-span.ts): the handler and its enqueue() calls run under it.
    const span = startToolSpan(
      options.name,
      String(key),
      (extra as { _meta?: unknown } | undefined)?._meta,
    );
    const ctx: ToolCallContext = { tool: options.name, idempotencyKey: String(key), ...span.trace };
    let handlerDone = false;
    try {
      const outcome = await context.with(span.context, () =>
        options.transactions.run(async (tx, trx) => {
          const claimed = await tx.query(sql.claim, [ctx.tool, ctx.idempotencyKey]);
          if (claimed.rows.length === 0) {
            const prior = await tx.query<{ result: unknown }>(sql.prior, [
              ctx.tool,
              ctx.idempotencyKey,
            ]);
            return { deduped: true as const, value: prior.rows[0]?.result ?? null };
          }
          const outbox = bindOutbox(heldWriter(input, ctx), tx, span.context);
          try {
            const value = await options.handler(input as ToolInput<Shape>, {
              tx,
              trx,
              outbox,
              ctx,
            });
            await tx.query(sql.save, [
              ctx.tool,
              ctx.idempotencyKey,
              toJsonText(value),
              idsOf(outbox),
            ]);
            handlerDone = true;
            return { deduped: false as const, value, enqueued: [...outbox.enqueued] };
          } finally {
            outbox.close();
          }
        }),
      );
      span.end(outcome.deduped);
      if (outcome.deduped) return dedupedResult(outcome.value);
      return committedResult(outcome.value, outcome.enqueued, options.summarize?.(outcome.value));
    } catch (error) {
      span.fail(error);
      return failedResult(error, handlerDone);
    }
  }

  return tool(
    options.name,
    options.description,
    shape,
    (args, extra) => call(args as Record<string, unknown>, extra),
    options.annotations ? { annotations: options.annotations } : undefined,
  );
}

/** The ids of the messages a call wrote, kept with its idempotency key (effect status). */
const idsOf = (outbox: { readonly enqueued: readonly { messageId: string }[] }) =>
  outbox.enqueued.map((m) => m.messageId);

function toJsonText(value: unknown): string {
  try {
    return JSON.stringify(value ?? null);
  } catch (error) {
    throw new Error(`the tool's result is not JSON-serialisable: ${(error as Error).message}`);
  }
}
