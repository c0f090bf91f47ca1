import { OutboxError, OutboxValidationError } from '../core/errors.js';
import type { DeadLetterPolicy } from '../dispatcher/options.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/**
 * What the decisions on held messages of both engines share (admin/approvals.ts for the claim
 * engine, lanes/lane-approvals.ts for the lanes engine): the ids they take, the error that says
 * why nothing was decided, and the retry while another statement holds a message.
 */

/**
 * Where a held message stands (migration 010):
 *
 * ```
 *                 approve (who, when, note)
 *   awaiting ─────────────────────────────────▶ approved ──▶ pending ──▶ published
 *      │  reject (who, when, reason)
 *      ├─────────────────────────────▶ rejected   (kept, never published)
 *      │  no decision by its expiry (default 7 days)
 *      └─────────────────────────────▶ expired    (treated as rejected)
 * ```
 */
export type ApprovalState = 'awaiting' | 'approved' | 'rejected' | 'expired';

/** One decided message. */
export interface DecidedMessage {
  id: string;
  messageId: string;
  topic: string;
  aggregateId: string;
  state: 'approved' | 'rejected';
}

/** Why one requested message could not be decided. */
export interface DecisionProblem {
  /** The id as given (row id or message id). */
  ref: string;
  /** `not-found`, `not-held` (it never needed approval), `decided` (already), `expired`. */
  reason: 'not-found' | 'not-held' | 'decided' | 'expired';
  /** Its state, when it was found. */
  state?: ApprovalState | null;
  decidedBy?: string | null;
  decidedAt?: Date | null;
  /** One sentence for people. */
  message: string;
}

/**
 * A decision was refused, and NOTHING was decided: a message was already decided (deciding twice
 * is an error, never a silent change), had expired, needed no approval, or an id matched nothing.
 * `problems` says which and why; the other messages are still waiting.
 */
export class OutboxApprovalError extends OutboxError {
  readonly problems: DecisionProblem[];

  constructor(message: string, problems: DecisionProblem[]) {
    super('OUTBOX_APPROVAL', message);
    this.name = 'OutboxApprovalError';
    this.problems = problems;
  }
}

const ROW_ID = /^[0-9]{1,19}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const MAX_IDS = 1000;
const MAX_TEXT = 2000;

function parseIds(ids: readonly string[]): { rowIds: string[]; messageIds: string[] } {
  if (!Array.isArray(ids) || ids.length === 0)
    throw new OutboxValidationError('ids', 'give at least one row id or message id');
  if (ids.length > MAX_IDS)
    throw new OutboxValidationError('ids', `at most ${MAX_IDS} per decision, got ${ids.length}`);
  const rowIds = new Set<string>();
  const messageIds = new Set<string>();
  for (const id of ids) {
    if (typeof id === 'string' && ROW_ID.test(id)) rowIds.add(id);
    else if (typeof id === 'string' && UUID.test(id)) messageIds.add(id.toLowerCase());
    else
      throw new OutboxValidationError(
        'ids',
        `"${String(id)}" is neither a row id (digits) nor a message id (UUID)`,
      );
  }
  return { rowIds: [...rowIds], messageIds: [...messageIds] };
}

/** A required decision text (who, the reason), trimmed; at most 2,000 characters. */
export function requiredText(field: string, value: unknown): string {
  if (typeof value !== 'string' || value.trim().length === 0)
    throw new OutboxValidationError(field, 'is required (a non-empty string)');
  if (value.length > MAX_TEXT)
    throw new OutboxValidationError(field, `is ${value.length} characters; at most ${MAX_TEXT}`);
  return value.trim();
}

/** What a decision statement returns per requested message (sql/approvals.ts `REPORT`). */
export interface DecisionRow {
  id: string;
  messageId: string;
  topic: string;
  aggregateId: string;
  state: ApprovalState | null;
  expiresAt: Date | string | null;
  decidedBy: string | null;
  decidedAt: Date | string | null;
  dispatched: boolean;
  decided: boolean;
  deferred: boolean;
}

const LOCK_NOT_AVAILABLE = '55P03';
const DEADLOCK = '40P01';
/** How long a decision keeps retrying while the messages are locked or a writer is mid-transaction. */
const BUSY_RETRY_MS = 5_000;

/**
 * Runs a decision statement until it decides or refuses: a row locked by another decision
 * (NOWAIT) or an aggregate a writer is mid-transaction on (`deferred`) is retried shortly.
 */
async function runDecision(
  executor: SqlExecutor,
  sql: string,
  values: unknown[],
): Promise<DecisionRow[]> {
  const deadline = Date.now() + BUSY_RETRY_MS;
  for (let attempt = 0; ; attempt++) {
    let busy: string;
    try {
      const { rows } = await executor.query<DecisionRow>(sql, values);
      if (!rows.some((r) => r.deferred)) return rows;
      busy = 'a writer of its aggregate was mid-transaction';
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (code !== LOCK_NOT_AVAILABLE && code !== DEADLOCK) throw error;
      busy = 'another statement held the message';
    }
    if (Date.now() > deadline)
      throw new OutboxApprovalError(
        `nothing was decided: ${busy} for ${BUSY_RETRY_MS / 1000} s; try again`,
        [],
      );
    await new Promise((resolve) => setTimeout(resolve, Math.min(10 * 2 ** attempt, 250)));
  }
}

function problemsOf(
  requested: readonly string[],
  rows: readonly DecisionRow[],
  verb: string,
): DecisionProblem[] {
  const problems: DecisionProblem[] = [];
  const byRef = new Map<string, DecisionRow>();
  for (const row of rows) {
    byRef.set(String(row.id), row);
    byRef.set(row.messageId.toLowerCase(), row);
  }
  const now = Date.now();
  for (const ref of requested) {
    const row = byRef.get(ref.toLowerCase());
    if (!row) {
      problems.push({ ref, reason: 'not-found', message: `${ref}: no such message` });
      continue;
    }
    const base = {
      ref,
      state: row.state,
      decidedBy: row.decidedBy,
      decidedAt: toDate(row.decidedAt),
    };
    if (row.state === null)
      problems.push({
        ...base,
        reason: 'not-held',
        message: `#${row.id} (${row.topic}) was not written for approval; there is nothing to ${verb}`,
      });
    else if (row.state === 'awaiting' && toDate(row.expiresAt)!.getTime() <= now)
      problems.push({
        ...base,
        reason: 'expired',
        message: `#${row.id} (${row.topic}) expired at ${toDate(row.expiresAt)!.toISOString()} without a decision; it will never be published`,
      });
    else if (row.state !== 'awaiting')
      problems.push({
        ...base,
        reason: row.state === 'expired' ? 'expired' : 'decided',
        message: `#${row.id} (${row.topic}) was already ${row.state}${row.decidedBy ? ` by ${row.decidedBy}` : ''}${row.decidedAt ? ` at ${toDate(row.decidedAt)!.toISOString()}` : ''}; a decision cannot be changed`,
      });
    else if (row.dispatched)
      problems.push({ ...base, reason: 'decided', message: `#${row.id} was already published` });
  }
  return problems;
}

function toDate(value: Date | string | null): Date | null {
  return value === null ? null : value instanceof Date ? value : new Date(value);
}

/**
 * Runs one decision statement (`sql`, the claim engine's or the lanes engine's, with the columns
 * of {@link DecisionRow}) and returns what it decided, or throws {@link OutboxApprovalError}
 * saying why nothing was: all or nothing.
 */
export async function decide(
  executor: SqlExecutor,
  ids: readonly string[],
  verb: 'approve' | 'reject',
  sql: string,
  values: (rowIds: string[], messageIds: string[]) => unknown[],
): Promise<DecidedMessage[]> {
  const { rowIds, messageIds } = parseIds(ids);
  const rows = await runDecision(executor, sql, values(rowIds, messageIds));
  const decided = rows.filter((r) => r.decided);
  const requested = [...rowIds, ...messageIds];
  if (decided.length === rows.length && rows.length > 0) {
    // Every ref matched a decided row (a missing ref would have refused the whole decision).
    return decided.map((r) => ({
      id: String(r.id),
      messageId: r.messageId,
      topic: r.topic,
      aggregateId: r.aggregateId,
      state: verb === 'approve' ? 'approved' : 'rejected',
    }));
  }
  const problems = problemsOf(requested, rows, verb);
  throw new OutboxApprovalError(
    `nothing was ${verb === 'approve' ? 'approved' : 'rejected'}: ${problems.map((p) => p.message).join('; ')}`,
    problems,
  );
}

/** The deciding side's dead-letter policy, checked: `hold` unless given. */
export function checkPolicy(policy: unknown): DeadLetterPolicy {
  const value = policy ?? 'hold';
  if (value !== 'hold' && value !== 'skip')
    throw new OutboxValidationError(
      'deadLetterPolicy',
      `must be "hold" or "skip", got "${String(value)}"`,
    );
  return value;
}
