import { OutboxValidationError } from '../core/errors.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import {
  callApprovalByIdSql,
  callApprovalsOfCallsSql,
  decideCallApprovalSql,
  expireCallApprovalsSql,
  listCallApprovalsSql,
  takeUndeliveredSql,
  undeliverCallApprovalSql,
} from '../sql/call-approvals.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { OutboxApprovalError } from './approvals.js';

/**
 * Approvals of agent tool CALLS (migration 022, issue 42): a framework paused a call before it
 * ran, and a person decides here — through this API, `outbox approve call-<n>`, or the
 * dashboard. The decision is the outbox's, not the framework's saved state's: the tool writes an
 * effect its policy holds unheld only for a call approved here, once, with the same input.
 *
 * ```
 *             decideCallApproval(approve)            tool runs once (used)
 *   awaiting ──────────────────────────▶ approved ─────────────────────▶
 *      │ decideCallApproval(reject)
 *      ├──────────────────────────▶ rejected   (the framework hands the model a denial)
 *      │ no decision before its expiry (default 7 days)
 *      └──────────────────────────▶ expired    (a denial, with the reason)
 * ```
 */
export type CallApprovalState = 'awaiting' | 'approved' | 'rejected' | 'expired';

/** One call's approval. */
export interface CallApproval {
  /** `call-<n>`: what `outbox approve` and {@link decideCallApproval} take. */
  approvalId: string;
  tool: string;
  /** The framework's id of the call (AI SDK `toolCallId`, OpenAI Agents `callId`, ...). */
  callId: string;
  /** The arguments the person is asked about. */
  input: unknown;
  state: CallApprovalState;
  requestedBy: string | null;
  requestedAt: Date;
  expiresAt: Date;
  decidedBy: string | null;
  decidedAt: Date | null;
  /** The note of an approval, the reason of a rejection or of an expiry. */
  reason: string | null;
  /** Your reference of the framework's saved state (thread id, RunState key), as you gave it. */
  stateRef: string | null;
  /** When the tool ran on it (approved only; once). */
  usedAt: Date | null;
}

/**
 * A decided call, as the application's callback gets it ({@link watchCallApprovals}): enough to
 * resume the run — load the saved state (`stateRef`), answer the framework for `callId`.
 */
export interface CallDecision extends CallApproval {
  state: 'approved' | 'rejected' | 'expired';
  /** `state === 'approved'`. Rejected and expired are both a denial for the framework. */
  approved: boolean;
  /** For the framework's denial: who refused and why, or that it expired. */
  denialReason?: string;
}

interface CallRow {
  id: string;
  tool: string;
  callId: string;
  input: unknown;
  state: CallApprovalState;
  requestedBy: string | null;
  requestedAt: Date | string;
  expiresAt: Date | string;
  decidedBy: string | null;
  decidedAt: Date | string | null;
  reason: string | null;
  stateRef: string | null;
  usedAt: Date | string | null;
  pastExpiry: boolean;
}

const toDate = (value: Date | string | null): Date | null =>
  value === null ? null : value instanceof Date ? value : new Date(value);

/** A row as the public shape; an awaiting row past its expiry reads as expired (the sweep may lag). */
export function toCallApproval(row: CallRow): CallApproval {
  const state = row.state === 'awaiting' && row.pastExpiry ? 'expired' : row.state;
  return {
    approvalId: `call-${row.id}`,
    tool: row.tool,
    callId: row.callId,
    input: row.input,
    state,
    requestedBy: row.requestedBy,
    requestedAt: toDate(row.requestedAt)!,
    expiresAt: toDate(row.expiresAt)!,
    decidedBy: row.decidedBy,
    decidedAt: toDate(row.decidedAt),
    reason:
      state === 'expired' && row.state === 'awaiting'
        ? `no decision before it expired at ${toDate(row.expiresAt)!.toISOString()}`
        : row.reason,
    stateRef: row.stateRef,
    usedAt: toDate(row.usedAt),
  };
}

/** What the framework is told when the call is not approved. */
export function denialReason(approval: CallApproval): string | undefined {
  if (approval.state === 'rejected')
    return `rejected by ${approval.decidedBy ?? 'a person'}: ${approval.reason ?? 'no reason given'}`;
  if (approval.state === 'expired') return `expired: ${approval.reason ?? 'no decision in time'}`;
  return undefined;
}

function toDecision(row: CallRow): CallDecision {
  const approval = toCallApproval(row);
  const denial = denialReason(approval);
  return {
    ...approval,
    state: approval.state as CallDecision['state'],
    approved: approval.state === 'approved',
    ...(denial ? { denialReason: denial } : {}),
  };
}

const CALL_REF = /^(?:call-)?([0-9]{1,19})$/;

/** Whether `ref` names a call approval (`call-12`), as `outbox approve` tells ids apart. */
export function isCallApprovalRef(ref: string): boolean {
  return /^call-[0-9]{1,19}$/.test(ref);
}

function parseRef(ref: string): string {
  const match = typeof ref === 'string' ? CALL_REF.exec(ref) : null;
  if (!match)
    throw new OutboxValidationError(
      'approvalId',
      `"${String(ref)}" is not a call approval id (call-<digits>, as outbox approvals lists it)`,
    );
  return match[1]!;
}

function requiredText(field: string, value: unknown): string {
  if (typeof value !== 'string' || value.trim().length === 0)
    throw new OutboxValidationError(field, 'is required (a non-empty string)');
  if (value.length > 2000)
    throw new OutboxValidationError(field, `is ${value.length} characters; at most 2000`);
  return value.trim();
}

/** Options of {@link decideCallApproval}. */
export interface DecideCallOptions {
  /** `true` approves, `false` rejects. */
  approve: boolean;
  /** Who decides: kept with the approval. Required. */
  by: string;
  /** Why: required to reject (the model is told), optional to approve. */
  reason?: string;
  /**
   * You resume the run yourself right after deciding: the decision is marked delivered and the
   * callback of {@link watchCallApprovals} is not called for it. Default `false`: it is.
   */
  delivered?: boolean;
  schema?: string;
}

/**
 * Records a person's decision on a paused tool call: who, when, why. Once: a decided, expired or
 * unknown approval is refused with {@link OutboxApprovalError} and nothing changes. Then answer the
 * framework (the adapters' helpers read the decision back from the outbox), or let the callback
 * of {@link watchCallApprovals} do it.
 *
 * @example
 * ```ts
 * await decideCallApproval(fromPg(pool), 'call-12', { approve: true, by: 'alice' });
 * ```
 */
export async function decideCallApproval(
  executor: SqlExecutor,
  approvalId: string,
  options: DecideCallOptions,
): Promise<CallDecision> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const id = parseRef(approvalId);
  if (typeof options.approve !== 'boolean')
    throw new OutboxValidationError('approve', 'must be true (approve) or false (reject)');
  const by = requiredText('by', options.by);
  const reason =
    options.approve && (options.reason === undefined || options.reason.trim() === '')
      ? null
      : requiredText('reason', options.reason);
  const { rows } = await executor.query<CallRow>(decideCallApprovalSql(schema), [
    id,
    options.approve ? 'approved' : 'rejected',
    by,
    reason,
    options.delivered === true,
  ]);
  if (rows[0]) return toDecision(rows[0]);
  const found = (await executor.query<CallRow>(callApprovalByIdSql(schema), [id])).rows[0];
  const verb = options.approve ? 'approved' : 'rejected';
  if (!found)
    throw new OutboxApprovalError(`nothing was ${verb}: call-${id}: no such call approval`, [
      { ref: approvalId, reason: 'not-found', message: `call-${id}: no such call approval` },
    ]);
  const current = toCallApproval(found);
  const message =
    current.state === 'expired'
      ? `call-${id} (${current.tool}) expired at ${current.expiresAt.toISOString()} without a decision; the call is denied`
      : `call-${id} (${current.tool}) was already ${current.state}${current.decidedBy ? ` by ${current.decidedBy}` : ''}${current.decidedAt ? ` at ${current.decidedAt.toISOString()}` : ''}; a decision cannot be changed`;
  throw new OutboxApprovalError(`nothing was ${verb}: ${message}`, [
    {
      ref: approvalId,
      reason: current.state === 'expired' ? 'expired' : 'decided',
      state: null,
      decidedBy: current.decidedBy,
      decidedAt: current.decidedAt,
      message,
    },
  ]);
}

/** One call approval by its id (`call-<n>`), or undefined when there is none. */
export async function getCallApproval(
  executor: SqlExecutor,
  approvalId: string,
  options: { schema?: string } = {},
): Promise<CallApproval | undefined> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const row = (await executor.query<CallRow>(callApprovalByIdSql(schema), [parseRef(approvalId)]))
    .rows[0];
  return row ? toCallApproval(row) : undefined;
}

/** The approvals of these calls (those that have one), for the adapters' resume helpers. */
export async function callApprovalsOf(
  executor: SqlExecutor,
  calls: readonly { tool: string; callId: string }[],
  options: { schema?: string } = {},
): Promise<CallApproval[]> {
  if (calls.length === 0) return [];
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const { rows } = await executor.query<CallRow>(callApprovalsOfCallsSql(schema), [
    calls.map((c) => c.tool),
    calls.map((c) => c.callId),
  ]);
  return rows.map(toCallApproval);
}

/** Call approvals, oldest first: `state` (default `awaiting`; `all` for every state), `limit` (100). */
export async function listCallApprovals(
  executor: SqlExecutor,
  options: { schema?: string; state?: CallApprovalState | 'all'; limit?: number } = {},
): Promise<CallApproval[]> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const state = options.state ?? 'awaiting';
  const { rows } = await executor.query<CallRow>(listCallApprovalsSql(schema), [
    state === 'all' ? null : state,
    options.limit ?? 100,
  ]);
  return rows.map(toCallApproval);
}

/** Expires up to `batchSize` (100) undecided call approvals past their expiry; returns them. */
export async function expireCallApprovals(
  executor: SqlExecutor,
  options: { schema?: string; batchSize?: number } = {},
): Promise<CallDecision[]> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const { rows } = await executor.query<CallRow>(expireCallApprovalsSql(schema), [
    options.batchSize ?? 100,
  ]);
  return rows.map(toDecision);
}

/** Options of {@link watchCallApprovals}. */
export interface WatchCallApprovalsOptions {
  executor: SqlExecutor;
  /**
   * Called once per decision made anywhere (your API call without `delivered`, the CLI, the
   * dashboard, a signed link) and per expiry: resume the run from `stateRef`, answering the
   * framework for `callId` (approved, or a denial with `denialReason`). A throw hands the decision
   * back: it is delivered again on the next poll.
   */
  onDecision: (decision: CallDecision) => Promise<void> | void;
  /** Poll interval in ms (default 1000). */
  intervalMs?: number;
  /** Whether each poll also expires what is past its expiry (default true). */
  expire?: boolean;
  schema?: string;
  /** Called with errors of a poll (default: ignored; the next poll tries again). */
  onError?: (error: unknown) => void;
}

/** A running watcher. */
export interface CallApprovalWatcher {
  /** One poll now: expire, then deliver what is decided; resolves with the decisions delivered. */
  poll(): Promise<CallDecision[]>;
  /** Stops polling (a poll under way finishes). */
  stop(): Promise<void>;
}

/**
 * Delivers decisions on paused tool calls to your application: every decision not yet delivered,
 * and every expiry (swept here), reaches `onDecision` once — several watchers on one database
 * share the work (SKIP LOCKED). Start one per process that can resume runs.
 *
 * @example
 * ```ts
 * const watcher = watchCallApprovals({
 *   executor: fromPg(pool),
 *   onDecision: async (d) => resumeRun(d.stateRef!, d.callId, d.approved, d.denialReason),
 * });
 * ```
 */
export function watchCallApprovals(options: WatchCallApprovalsOptions): CallApprovalWatcher {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const interval = options.intervalMs ?? 1000;
  let running: Promise<CallDecision[]> | undefined;
  let stopped = false;

  const once = async (): Promise<CallDecision[]> => {
    if (options.expire !== false)
      await expireCallApprovals(options.executor, { schema: options.schema });
    const { rows } = await options.executor.query<CallRow>(takeUndeliveredSql(schema), [100]);
    const delivered: CallDecision[] = [];
    for (const row of rows) {
      const decision = toDecision(row);
      try {
        await options.onDecision(decision);
        delivered.push(decision);
      } catch (error) {
        await options.executor.query(undeliverCallApprovalSql(schema), [row.id]);
        options.onError?.(error);
      }
    }
    return delivered;
  };
  const poll = () => {
    running = (running ?? Promise.resolve([])).then(once, once);
    return running;
  };
  const timer = setInterval(() => {
    if (!stopped) poll().catch((error: unknown) => options.onError?.(error));
  }, interval);
  timer.unref?.();
  return {
    poll,
    stop: async () => {
      stopped = true;
      clearInterval(timer);
      await running?.catch(() => undefined);
    },
  };
}
