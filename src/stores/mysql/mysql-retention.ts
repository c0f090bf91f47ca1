import { OutboxValidationError } from '../../core/errors.js';
import { nowSql, pruneBoundarySql, pruneDispatchedSql } from '../../sql/mysql/admin.js';
import { execute, selectRows, type MysqlPool } from './mysql-connection.js';

/** Options of {@link pruneMysqlOutbox}. */
export interface PruneMysqlOptions {
  /** Delete messages dispatched longer ago than this, in ms (by the server's clock). */
  olderThanMs: number;
  /** Messages per statement (each commits by itself). Default 1 000. */
  batchSize?: number;
}

/**
 * Deletes dispatched messages older than `olderThanMs`, in bounded batches, each a statement
 * (and transaction) of its own (src/sql/mysql/admin.ts): writers and dispatchers wait for at most
 * one batch, never for the whole run. Pending messages and dead letters are never touched.
 * Returns how many messages were deleted. Sequences are kept in `outbox_aggregates`, so an
 * aggregate whose rows were all pruned continues where it was.
 */
export async function pruneMysqlOutbox(
  pool: MysqlPool,
  options: PruneMysqlOptions,
): Promise<number> {
  if (!Number.isFinite(options.olderThanMs) || options.olderThanMs < 0)
    throw new OutboxValidationError('olderThanMs', 'must be a number of ms >= 0');
  const batchSize = options.batchSize ?? 1_000;
  if (!Number.isInteger(batchSize) || batchSize < 1)
    throw new OutboxValidationError('batchSize', 'must be a positive integer');
  const [clock] = await selectRows<{ now: number }>(pool, nowSql);
  const cutoff = Number(clock!.now) - options.olderThanMs;
  const [boundary] = await selectRows<{ id: number }>(pool, pruneBoundarySql, [cutoff]);
  const below = boundary ? Number(boundary.id) : Number.MAX_SAFE_INTEGER;
  let deleted = 0;
  for (;;) {
    const { affectedRows } = await execute(pool, pruneDispatchedSql, [below, cutoff, batchSize]);
    deleted += affectedRows;
    if (affectedRows < batchSize) return deleted;
  }
}
