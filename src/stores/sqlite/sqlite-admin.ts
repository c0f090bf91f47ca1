import type { DeadLetter, ReplaySelection } from '../../admin/dead-letters.js';
import type { OutboxStatus } from '../../admin/status.js';
import { OutboxValidationError } from '../../core/errors.js';
import {
  attemptsDistributionSql,
  lastErrorsSql,
  listDeadSql,
  replaySql,
  statusSql,
} from '../../sql/sqlite/admin.js';
import { globToSqliteGlob } from '../../sql/sqlite/claim.js';
import { numbered, prepared, type SqliteDatabase } from './sqlite-database.js';

/**
 * {@link OutboxStatus} of a SQLite outbox: the Postgres status's shape, so `outbox status`, the
 * metrics and dashboards read both. What SQLite does not have is empty: approvals (never held
 * here) and paused routes (no route limits).
 */
export function readSqliteStatus(
  db: SqliteDatabase,
  options: { lastErrors?: number; now?: number } = {},
): OutboxStatus {
  const now = options.now ?? Date.now();
  // One read transaction: the three reads see the same moment (WAL readers never wait). Inside
  // the caller's own transaction, that one.
  const own = !db.inTransaction;
  if (own) db.exec('BEGIN');
  try {
    const summary = prepared(db, statusSql).get(numbered([now])) as Record<string, number>;
    const attempts = prepared(db, attemptsDistributionSql).all() as {
      attempts: number;
      messages: number;
    }[];
    const errors = prepared(db, lastErrorsSql).all(numbered([options.lastErrors ?? 5])) as (Omit<
      OutboxStatus['lastErrors'][number],
      'dead'
    > & { dead: number })[];
    return {
      backlog: Number(summary.backlog),
      oldestPendingAgeSeconds: Math.max(0, Number(summary.oldestPendingAgeSeconds)),
      dueNow: Number(summary.dueNow),
      inFlight: Number(summary.inFlight),
      scheduled: Number(summary.scheduled),
      deadLetters: Number(summary.deadLetters),
      awaitingApproval: 0,
      oldestAwaitingApprovalAgeSeconds: 0,
      rejected: 0,
      expired: 0,
      attempts: attempts.map((a) => ({
        attempts: Number(a.attempts),
        messages: Number(a.messages),
      })),
      lastErrors: errors.map((e) => ({ ...e, attempts: Number(e.attempts), dead: e.dead === 1 })),
      pausedRoutes: [],
    };
  } finally {
    if (own) db.exec('COMMIT');
  }
}

/** Lists dead letters, oldest first. `topic` is a glob (`payment.*`). */
export function listSqliteDeadLetters(
  db: SqliteDatabase,
  options: { topic?: string; limit?: number } = {},
): DeadLetter[] {
  const rows = prepared(db, listDeadSql).all(
    numbered([options.topic ? globToSqliteGlob(options.topic) : null, options.limit ?? 100]),
  ) as (Omit<DeadLetter, 'createdAt' | 'deadLetteredAt'> & {
    createdAt: number;
    deadLetteredAt: number;
  })[];
  return rows.map((r) => ({
    ...r,
    sequence: Number(r.sequence),
    attempts: Number(r.attempts),
    createdAt: new Date(Number(r.createdAt)),
    deadLetteredAt: new Date(Number(r.deadLetteredAt)),
  }));
}

const ROW_ID = /^[0-9]{1,19}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Makes dead letters pending again (attempts 0, due now, same message id). Returns what was
 * replayed; ids that are not dead letters are left alone (absent from the result).
 */
export function replaySqliteDeadLetters(
  db: SqliteDatabase,
  selection: ReplaySelection,
  options: { now?: number } = {},
): { id: string; messageId: string; topic: string }[] {
  const rowIds: number[] = [];
  const messageIds: string[] = [];
  const all = 'allDead' in selection && selection.allDead === true;
  if (!all) {
    const ids = 'ids' in selection ? selection.ids : [];
    if (ids.length === 0)
      throw new OutboxValidationError('ids', 'give at least one id, or select all dead letters');
    for (const id of ids) {
      if (ROW_ID.test(id)) rowIds.push(Number(id));
      else if (UUID.test(id)) messageIds.push(id.toLowerCase());
      else
        throw new OutboxValidationError(
          'ids',
          `"${id}" is neither a row id (digits) nor a message id (UUID)`,
        );
    }
  }
  return prepared(db, replaySql).all(
    numbered([
      JSON.stringify(rowIds),
      JSON.stringify(messageIds),
      all ? 1 : 0,
      selection.topic ? globToSqliteGlob(selection.topic) : null,
      options.now ?? Date.now(),
    ]),
  ) as { id: string; messageId: string; topic: string }[];
}
