import {
  parseReplaySelection,
  type DeadLetter,
  type ReplaySelection,
} from '../../admin/dead-letters.js';
import type { OutboxStatus } from '../../admin/status.js';
import { globToLike } from '../../dispatcher/topic-patterns.js';
import {
  attemptsDistributionSql,
  lastErrorsSql,
  listDeadSql,
  replaySql,
  selectDeadForReplaySql,
  statusSql,
} from '../../sql/mysql/admin.js';
import { inTransaction, selectRows, type MysqlPool } from './mysql-connection.js';

/**
 * {@link OutboxStatus} of a MySQL/MariaDB outbox: the Postgres status's shape, so
 * `outbox status`, the metrics and dashboards read both. What MySQL does not have is empty:
 * approvals (never held here) and paused routes (no route limits). The three reads run in one
 * transaction (READ COMMITTED: each sees the latest commits; they are counts for people, not
 * for decisions).
 */
export async function readMysqlStatus(
  pool: MysqlPool,
  options: { lastErrors?: number } = {},
): Promise<OutboxStatus> {
  return inTransaction(pool, async (connection) => {
    const [summary] = await selectRows<Record<string, string | number>>(connection, statusSql);
    const attempts = await selectRows<{ attempts: number; messages: number }>(
      connection,
      attemptsDistributionSql,
    );
    const errors = await selectRows<
      Omit<OutboxStatus['lastErrors'][number], 'dead'> & { dead: number }
    >(connection, lastErrorsSql, [options.lastErrors ?? 5]);
    return {
      backlog: Number(summary!.backlog),
      oldestPendingAgeSeconds: Math.max(0, Number(summary!.oldestPendingAgeSeconds)),
      dueNow: Number(summary!.dueNow),
      inFlight: Number(summary!.inFlight),
      scheduled: Number(summary!.scheduled),
      deadLetters: Number(summary!.deadLetters),
      awaitingApproval: 0,
      oldestAwaitingApprovalAgeSeconds: 0,
      rejected: 0,
      expired: 0,
      attempts: attempts.map((a) => ({
        attempts: Number(a.attempts),
        messages: Number(a.messages),
      })),
      lastErrors: errors.map((e) => ({
        ...e,
        attempts: Number(e.attempts),
        dead: Number(e.dead) === 1,
      })),
      pausedRoutes: [],
    };
  });
}

/** Lists dead letters, oldest first. `topic` is a glob (`payment.*`). */
export async function listMysqlDeadLetters(
  pool: MysqlPool,
  options: { topic?: string; limit?: number } = {},
): Promise<DeadLetter[]> {
  const like = options.topic ? globToLike(options.topic) : null;
  const rows = await selectRows<
    Omit<DeadLetter, 'createdAt' | 'deadLetteredAt'> & { createdAt: number; deadLetteredAt: number }
  >(pool, listDeadSql, [like, like, options.limit ?? 100]);
  return rows.map((r) => ({
    ...r,
    sequence: Number(r.sequence),
    attempts: Number(r.attempts),
    createdAt: new Date(Number(r.createdAt)),
    deadLetteredAt: new Date(Number(r.deadLetteredAt)),
  }));
}

/**
 * Makes dead letters pending again (attempts 0, due now, same message id). Returns what was
 * replayed; ids that are not dead letters are left alone (absent from the result).
 */
export async function replayMysqlDeadLetters(
  pool: MysqlPool,
  selection: ReplaySelection,
): Promise<{ id: string; messageId: string; topic: string }[]> {
  const { rowIds, messageIds, all } = parseReplaySelection(selection);
  const like = selection.topic ? globToLike(selection.topic) : null;
  return inTransaction(pool, async (connection) => {
    // `IN (?)` needs a non-empty list: 0 and '' match no row.
    const dead = await selectRows<{ id: string; messageId: string; topic: string }>(
      connection,
      selectDeadForReplaySql,
      [
        rowIds.length ? rowIds : ['0'],
        messageIds.length ? messageIds : [''],
        all ? 1 : 0,
        like,
        like,
      ],
    );
    if (dead.length > 0) await connection.query(replaySql, [dead.map((d) => d.id)]);
    return dead;
  });
}
