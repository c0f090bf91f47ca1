import { OutboxValidationError } from '../../core/errors.js';
import { pruneDispatchedSql } from '../../sql/sqlite/admin.js';
import { immediate, numbered, prepared, type SqliteDatabase } from './sqlite-database.js';

/** Options of {@link pruneSqliteOutbox}. */
export interface PruneSqliteOptions {
  /** Delete messages dispatched longer ago than this, in ms. */
  olderThanMs: number;
  /** Messages per transaction. Default 1 000. */
  batchSize?: number;
  /** Clock in ms since the epoch. Default `Date.now`. */
  now?: () => number;
}

/**
 * Deletes dispatched messages older than `olderThanMs`, in bounded batches, each in a
 * transaction of its own (src/sql/sqlite/admin.ts `pruneDispatchedSql`): writers and dispatchers
 * wait for at most one batch, never for the whole run. Pending messages and dead letters are
 * never touched. Returns how many messages were deleted. Sequences are kept in
 * `outbox_aggregates`, so an aggregate whose rows were all pruned continues where it was.
 */
export function pruneSqliteOutbox(db: SqliteDatabase, options: PruneSqliteOptions): number {
  if (!Number.isFinite(options.olderThanMs) || options.olderThanMs < 0)
    throw new OutboxValidationError('olderThanMs', 'must be a number of ms >= 0');
  const batchSize = options.batchSize ?? 1_000;
  if (!Number.isInteger(batchSize) || batchSize < 1)
    throw new OutboxValidationError('batchSize', 'must be a positive integer');
  const cutoff = (options.now ?? Date.now)() - options.olderThanMs;
  let deleted = 0;
  for (;;) {
    const { changes } = immediate(db, () =>
      prepared(db, pruneDispatchedSql).run(numbered([cutoff, batchSize])),
    );
    deleted += changes;
    if (changes < batchSize) return deleted;
  }
}
