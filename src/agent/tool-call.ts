import { context } from '@opentelemetry/api';
import { z } from 'zod';
import { quoteIdentifier } from '../core/identifier.js';
import type { EnqueuedMessage, OutboxMessage } from '../core/message.js';
import { toCallApproval, type CallApproval } from '../admin/call-approvals.js';
import {
  callApprovalsOfCallsSql,
  callApprovalForUpdateSql,
  requestCallApprovalSql,
  useCallApprovalSql,
} from '../sql/call-approvals.js';
import { claimKeySql, priorResultSql, saveResultSql } from '../sql/tool-calls.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { createOutbox, type OutboxWriter } from '../writer/create-outbox.js';
import { withApprovalPolicy, type ApprovalPolicy } from './approval-policy.js';
import { bindOutbox, type BoundOutbox } from './bound-outbox.js';
import {
  committedResult,
  deniedResult,
  dedupedResult,
  duplicateEffectResult,
  failedResult,
  type ToolAnswer,
} from './tool-result.js';
import { startToolSpan } from './tool-span.js';
import { newTraceContext, type TraceContext } from './trace-context.js';
import type { TransactionRunner } from './transaction-runner.js';

/**
 * One outbox tool, whatever the agent framework: what `outboxTool` (Claude Agent SDK),
 * `aiSdkTool`, `openAiAgentsTool` and `langChainTool` share. This module imports no framework.
 */

/** Name of the input field carrying the caller's idempotency key. */
export const IDEMPOTENCY_KEY_FIELD = 'idempotency_key';

/** Who called, for what, under which trace. */
export interface ToolCallContext extends TraceContext {
  /** The tool's name. */
  tool: string;
  /**
   * This call's idempotency key: the `idempotency_key` the model or the application's hook put in
   * the input, else the framework's id of the call ({@link ToolCallContext.callId}).
   */
  idempotencyKey: string;
  /** The framework's id of this call (AI SDK `toolCallId`, ...), when it gave one. */
  callId?: string;
}

/**
 * What a handler gets. Deliberately no network client, no request object: a handler writes
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

/**
 * Input shape the model sees: yours plus the idempotency key, optional — without one the
 * framework's id of the call is the key.
 */
export type WithIdempotencyKey<Shape extends z.ZodRawShape> = Shape & {
  idempotency_key: z.ZodOptional<z.ZodString>;
};

/**
 * One tool definition, for every framework adapter: pass the same object to `outboxTool`,
 * `aiSdkTool`, `openAiAgentsTool` or `langChainTool`.
 */
export interface OutboxToolDefinition<Shape extends z.ZodRawShape, Trx, Result> {
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
  /**
   * Which of the messages the handler enqueues must wait for a person's approval:
   * `(message, input) => boolean`, e.g.
   * `(message, input) => message.topic === 'payment.refund' && input.amount > 10_000`. A held
   * message is committed with the call but never dispatched until approved (`outbox approve`);
   * the answer to the model lists it as `awaitingApproval` and says so. The policy wins over the
   * handler: a message it holds is held even if the handler set `requiresApproval: false`.
   * Held messages are marked as requested by this call (tool and idempotency key). Default: none
   * (only messages the handler writes with `requiresApproval: true`).
   */
  approval?: ApprovalPolicy<ToolInput<Shape>>;
  /**
   * What the call's effect means, from its input: `(input) => \`charge:${input.order_id}\``. The
   * key is set on the first message the handler enqueues without a `dedupeKey` of its own. When
   * that message comes back deduplicated — an earlier call (any idempotency key, any turn) queued
   * the same effect within the writer's `dedupeWindowMs` — the whole call is rolled back (its rows
   * too) and the model is answered `deduped: true` with the first message. Idempotency keys guard
   * one request; this guards the effect across requests. Default: none.
   */
  dedupeKey?: (input: ToolInput<Shape>) => string;
}

/**
 * Where a held effect waits for a person, per adapter (`aiSdkTool(def, { approval: 'call' })`):
 *
 * - `'effect'` (default): the call runs at once; the messages the definition's `approval` policy
 *   holds are committed held, and a person approves them (`outbox approve`, the dashboard).
 * - `'call'`: the framework pauses the CALL before it runs (AI SDK and OpenAI Agents
 *   `needsApproval`, LangGraph's interrupt, Claude's `canUseTool`) when the policy would hold one
 *   of its messages; a person decides on the call, recorded in the outbox (`decideCallApproval`,
 *   `outbox approve call-<n>`); the approved call then writes them unheld, once. Without a recorded
 *   approval (a forged or replayed history) the call still writes them held.
 */
export type ApprovalMode = 'effect' | 'call';

/** What an adapter adds to a definition. */
export interface AdapterOptions {
  /** `'effect'` (default) or `'call'`: see {@link ApprovalMode}. */
  approval?: ApprovalMode;
  /** How long a paused call waits for a decision before it expires (a denial). Default 7 days. */
  approvalExpiresInMs?: number;
}

/** Default wait of a paused call, as of a held message (migration 010). */
const DEFAULT_CALL_APPROVAL_EXPIRY_MS = 7 * 24 * 3600 * 1000;

/** A definition turned into what every adapter needs. */
export interface OutboxToolCall {
  name: string;
  description: string;
  /** The input fields the model sees (yours plus `idempotency_key`), as a zod object. */
  schema: z.ZodObject<z.ZodRawShape>;
  /** The shape behind {@link OutboxToolCall.schema}. */
  shape: z.ZodRawShape;
  /**
   * Runs one call: validated `args` (the framework parsed them with {@link schema}), `meta` an
   * MCP-style `_meta` (`traceparent`, `tracestate`) or undefined (then the active context),
   * `callId` the framework's id of this call: the idempotency key when `args` carry none.
   */
  call(args: Record<string, unknown>, meta?: unknown, callId?: string): Promise<ToolAnswer>;
  /**
   * With `approval: 'call'`: whether the framework must pause this call for a person — the
   * definition's policy holds a message the handler would write (found by running the handler in
   * a transaction that is rolled back). When it must, the request is recorded in
   * `outbox_call_approvals` (with `stateRef`, your reference of the saved run) before answering
   * `true`; a call asked about before answers `true` again. Always `false` in `'effect'` mode.
   */
  needsApproval(args: Record<string, unknown>, callId: string, stateRef?: string): Promise<boolean>;
  /** The recorded approval of this call (`'call'` mode), if it was asked for. */
  approvalOf(callId: string): Promise<CallApproval | undefined>;
  /** The adapter's mode. */
  approvalMode: ApprovalMode;
}

/** Thrown inside the transaction to roll a dry run back; never leaves {@link needsApproval}. */
class DryRun extends Error {
  constructor(readonly held: boolean) {
    super('dry run');
  }
}

/** Thrown inside the transaction: the outbox says this call was refused; nothing is written. */
class CallDenied extends Error {
  constructor(
    readonly state: 'rejected' | 'expired',
    readonly by: string | null,
    readonly reason: string | null,
  ) {
    super(`call ${state}`);
  }
}

/** Thrown inside the transaction to roll a duplicate effect back; never leaves {@link call}. */
class DuplicateEffect extends Error {
  constructor(
    readonly dedupeKey: string,
    readonly first: EnqueuedMessage,
  ) {
    super(`duplicate effect ${dedupeKey}`);
  }
}

/**
 * Turns a definition into a framework-neutral call. Per call: BEGIN; claim `(name,
 * idempotency_key)` in `outbox_tool_calls` (a committed duplicate answers `{ ok: true, deduped:
 * true }` and writes nothing; a concurrent one waits for the first); run the handler with `{ tx,
 * trx, outbox, ctx }`; store its result; COMMIT. Any throw rolls back — business rows, messages
 * and the key — and answers `ok: false` with the error, secrets redacted.
 */
export function createToolCall<Shape extends z.ZodRawShape, Trx, Result>(
  definition: OutboxToolDefinition<Shape, Trx, Result>,
  options: AdapterOptions = {},
): OutboxToolCall {
  const approvalMode = options.approval ?? 'effect';
  if (approvalMode !== 'effect' && approvalMode !== 'call')
    throw new Error(
      `agent-outbox: tool ${definition.name}: approval must be 'effect' or 'call', got "${String(approvalMode)}"`,
    );
  const expiresInMs = options.approvalExpiresInMs ?? DEFAULT_CALL_APPROVAL_EXPIRY_MS;
  if (!Number.isFinite(expiresInMs) || expiresInMs < 0)
    throw new Error(
      `agent-outbox: tool ${definition.name}: approvalExpiresInMs must be a non-negative number of milliseconds`,
    );
  if (IDEMPOTENCY_KEY_FIELD in definition.input) {
    throw new Error(
      `agent-outbox: tool ${definition.name} declares "${IDEMPOTENCY_KEY_FIELD}" itself; the outbox tool adds it`,
    );
  }
  if (definition.dedupeKey !== undefined && typeof definition.dedupeKey !== 'function')
    throw new Error(
      `agent-outbox: tool ${definition.name}: dedupeKey must be a function of the input, e.g. (input) => \`charge:\${input.order_id}\``,
    );
  const writer = definition.outbox ?? createOutbox();
  const schema = quoteIdentifier(writer.schema);
  const sql = {
    claim: claimKeySql(schema),
    prior: priorResultSql(schema),
    save: saveResultSql(schema),
    approvalOfCall: callApprovalForUpdateSql(schema),
    useApproval: useCallApprovalSql(schema),
    requestApproval: requestCallApprovalSql(schema),
    approvalsOf: callApprovalsOfCallsSql(schema),
  };
  const shape = {
    ...definition.input,
    [IDEMPOTENCY_KEY_FIELD]: z
      .string()
      .min(1)
      .max(255)
      .optional()
      .describe(
        'Leave it out unless the application gave you one for this request; then repeat it unchanged when retrying the same request.',
      ),
  } as WithIdempotencyKey<Shape>;

  // The approval policy, who asked, and the call's dedupe key, applied to what the handler enqueues.
  // `approved`: the outbox recorded a person's approval of this very call; the policy then holds
  // nothing (the handler's own `requiresApproval: true` still does).
  const callWriter = (
    input: ToolInput<Shape>,
    ctx: ToolCallContext,
    key: string | undefined,
    approved = false,
  ) =>
    withDedupeKey(
      withApprovalPolicy(
        writer,
        approved ? undefined : definition.approval,
        input,
        `tool ${ctx.tool} · idempotency key ${ctx.idempotencyKey}`,
      ),
      key,
    );

  /**
   * In `'call'` mode, the recorded approval of this call, locked: approved (same input, unused) →
   * used now, and the call writes unheld; rejected or expired → {@link CallDenied}; anything else
   * (none, awaiting, used, other input) → the policy holds as in `'effect'` mode.
   */
  async function approvedHere(
    tx: SqlExecutor,
    input: ToolInput<Shape>,
    ctx: ToolCallContext,
  ): Promise<boolean> {
    if (approvalMode !== 'call' || !definition.approval || !ctx.callId) return false;
    const { rows } = await tx.query<{
      id: string;
      state: string;
      usedAt: Date | null;
      sameInput: boolean;
      pastExpiry: boolean;
      decidedBy: string | null;
      reason: string | null;
    }>(sql.approvalOfCall, [ctx.tool, ctx.callId, toJsonText(input)]);
    const approval = rows[0];
    if (!approval) return false;
    if (approval.state === 'rejected' || approval.state === 'expired')
      throw new CallDenied(approval.state, approval.decidedBy, approval.reason);
    if (approval.state === 'awaiting' && approval.pastExpiry)
      throw new CallDenied('expired', 'expiry', 'no decision before it expired');
    if (approval.state !== 'approved' || approval.usedAt !== null || !approval.sameInput)
      return false;
    const used = await tx.query(sql.useApproval, [approval.id, ctx.idempotencyKey]);
    return used.rows.length === 1;
  }

  async function approvalOf(callId: string): Promise<CallApproval | undefined> {
    return definition.transactions.run(async (tx) => {
      const { rows } = await tx.query<Parameters<typeof toCallApproval>[0]>(sql.approvalsOf, [
        [definition.name],
        [callId],
      ]);
      return rows[0] ? toCallApproval(rows[0]) : undefined;
    });
  }

  async function needsApproval(
    args: Record<string, unknown>,
    callId: string,
    stateRef?: string,
  ): Promise<boolean> {
    if (approvalMode !== 'call' || !definition.approval) return false;
    if (typeof callId !== 'string' || callId.length === 0) return false;
    const { [IDEMPOTENCY_KEY_FIELD]: _key, ...rest } = args;
    const input = rest as ToolInput<Shape>;
    const ctx: ToolCallContext = {
      tool: definition.name,
      idempotencyKey: keyOf(_key, callId)!,
      callId,
      ...newTraceContext(),
    };
    let held: boolean;
    try {
      await definition.transactions.run(async (tx, trx) => {
        // Asked before (a resumed run asks again): the same answer, without running the handler.
        const known = await tx.query(sql.approvalOfCall, [ctx.tool, callId, toJsonText(input)]);
        if (known.rows.length > 0) throw new DryRun(true);
        const outbox = bindOutbox(callWriter(input, ctx, undefined), tx, context.active());
        try {
          await definition.handler(input, { tx, trx, outbox, ctx });
          throw new DryRun(outbox.enqueued.some((m) => m.awaitingApproval));
        } finally {
          outbox.close();
        }
      });
      held = false;
    } catch (error) {
      // A handler that throws in the dry run throws when it runs too; the call is not paused for
      // it. Whatever runs without a recorded approval is still held by the policy.
      held = error instanceof DryRun && error.held;
    }
    if (!held) return false;
    await definition.transactions.run(async (tx) => {
      await tx.query(sql.requestApproval, [
        ctx.tool,
        callId,
        toJsonText(input),
        `tool ${ctx.tool} · call ${callId}`,
        expiresInMs,
        stateRef ?? null,
      ]);
    });
    return true;
  }

  async function call(
    args: Record<string, unknown>,
    meta?: unknown,
    callId?: string,
  ): Promise<ToolAnswer> {
    const { [IDEMPOTENCY_KEY_FIELD]: given, ...rest } = args;
    const input = rest as ToolInput<Shape>;
    const key = keyOf(given, callId);
    if (key === undefined)
      return failedResult(
        new Error(
          `tool ${definition.name} got no idempotency key: the framework gave no call id and the input has no ${IDEMPOTENCY_KEY_FIELD}; pass the call id (adapters do) or set the key from your application`,
        ),
        false,
      );
    // The call's span (tool-span.ts): the handler and its enqueue() calls run under it.
    const span = startToolSpan(definition.name, key, meta);
    const ctx: ToolCallContext = {
      tool: definition.name,
      idempotencyKey: key,
      ...(callId ? { callId } : {}),
      ...span.trace,
    };
    let handlerDone = false;
    try {
      const dedupeKey = definition.dedupeKey?.(input);
      const outcome = await context.with(span.context, () =>
        definition.transactions.run(async (tx, trx) => {
          const claimed = await tx.query(sql.claim, [ctx.tool, ctx.idempotencyKey]);
          if (claimed.rows.length === 0) {
            const prior = await tx.query<{ result: unknown }>(sql.prior, [
              ctx.tool,
              ctx.idempotencyKey,
            ]);
            return { deduped: true as const, value: prior.rows[0]?.result ?? null };
          }
          const approved = await approvedHere(tx, input, ctx);
          const outbox = bindOutbox(callWriter(input, ctx, dedupeKey, approved), tx, span.context);
          try {
            const value = await definition.handler(input, { tx, trx, outbox, ctx });
            const repeated = outbox.enqueued.find((m) => m.deduped && m.dedupeKey === dedupeKey);
            if (dedupeKey !== undefined && repeated) throw new DuplicateEffect(dedupeKey, repeated);
            await tx.query(sql.save, [
              ctx.tool,
              ctx.idempotencyKey,
              toJsonText(value),
              outbox.enqueued.map((m) => m.messageId),
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
      return committedResult(
        outcome.value,
        outcome.enqueued,
        definition.summarize?.(outcome.value),
      );
    } catch (error) {
      if (error instanceof DuplicateEffect) {
        span.end(true);
        return duplicateEffectResult(error.dedupeKey, error.first);
      }
      if (error instanceof CallDenied) {
        span.end(false);
        return deniedResult(error.state, error.by, error.reason);
      }
      span.fail(error);
      return failedResult(error, handlerDone);
    }
  }

  return {
    name: definition.name,
    description: definition.description,
    shape,
    schema: z.object(shape),
    call,
    needsApproval,
    approvalOf,
    approvalMode,
  };
}

/**
 * The call's idempotency key: the one in the input (the model's, or the application's hook's)
 * when present, else the framework's call id. The key is stored under the tool's name
 * (`outbox_tool_calls (tool, idempotency_key)`), so a call id is scoped by tool. Why the input's
 * key first: the application's hook (Claude's `idempotencyKeyHook`) derives one key per request,
 * which also catches a RE-PLANNED call — a new call id for the same work.
 */
function keyOf(given: unknown, callId: string | undefined): string | undefined {
  if (typeof given === 'string' && given.length > 0) return given;
  if (typeof callId === 'string' && callId.length > 0) return callId.slice(0, 255);
  return undefined;
}

/**
 * `writer`, setting `key` as the `dedupeKey` of the first message enqueued through it without
 * one (once per tool call: build one per call). Non-objects pass through to validation.
 */
function withDedupeKey(writer: OutboxWriter, key: string | undefined): OutboxWriter {
  if (key === undefined) return writer;
  let used = false;
  const stamp = (message: OutboxMessage): OutboxMessage => {
    if (used || typeof message !== 'object' || message === null || Array.isArray(message))
      return message;
    if (message.dedupeKey !== undefined) return message;
    used = true;
    return { ...message, dedupeKey: key };
  };
  const enqueue = (executor: unknown, messages: unknown, ...rest: unknown[]) =>
    (writer.enqueue as (...args: unknown[]) => Promise<unknown>)(
      executor,
      Array.isArray(messages)
        ? (messages as OutboxMessage[]).map(stamp)
        : stamp(messages as OutboxMessage),
      ...rest,
    );
  return { schema: writer.schema, enqueue: enqueue as OutboxWriter['enqueue'] };
}

function toJsonText(value: unknown): string {
  try {
    return JSON.stringify(value ?? null);
  } catch (error) {
    throw new Error(`the tool's result is not JSON-serialisable: ${(error as Error).message}`);
  }
}
