import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { pruneLedgerBatchSql } from '../sql/prune-ledger.js';

/** Options of {@link pruneLedger}. */
export interface PruneLedgerOptions {
  /** Age (of `processed_at`) beyond which done rows are deleted, in ms. Default 14 days. */
  olderThanMs?: number;
  /** Rows deleted per statement. Default 1000. */
  batchSize?: number;
  /** Stop after this many batches (bounds one run; the next run continues). Default unlimited. */
  maxBatches?: number;
  /** Schema of the ledger. Default `public`. */
  schema?: string;
}

/** What {@link pruneLedger} deleted. */
export interface PruneLedgerResult {
  deleted: number;
  batches: number;
}

/** Default ledger retention: 14 days (SPEC §4.9). */
export const DEFAULT_LEDGER_RETENTION_MS = 14 * 24 * 60 * 60 * 1000;

/**
 * Deletes done ledger rows older than `olderThanMs`, `batchSize` rows per statement, until none
 * is left (or `maxBatches`). Pass a Pool-backed executor (`fromPg(pool)`) so every batch is its own
 * short transaction — do not call it inside one. Claimed rows are never touched.
 *
 * Keep retention longer than the longest time a broker may redeliver a message (NATS
 * `max_age`, a queue's retention, a webhook sender's retry horizon): a message delivered after
 * its ledger row was pruned runs its effect again (ordered topics are still protected by their
 * position).
 *
 * @example
 * ```ts
 * const { deleted } = await pruneLedger(fromPg(pool), { olderThanMs: 7 * 86_400_000 });
 * ```
 */
export async function pruneLedger(
  executor: SqlExecutor,
  options: PruneLedgerOptions = {},
): Promise<PruneLedgerResult> {
  const olderThanMs = options.olderThanMs ?? DEFAULT_LEDGER_RETENTION_MS;
  const batchSize = options.batchSize ?? 1000;
  const maxBatches = options.maxBatches ?? Infinity;
  if (!(olderThanMs >= 0)) throw new TypeError('pruneLedger: olderThanMs must be >= 0');
  if (!Number.isInteger(batchSize) || batchSize < 1)
    throw new TypeError('pruneLedger: batchSize must be a positive integer');
  const sql = pruneLedgerBatchSql(quoteIdentifier(options.schema ?? DEFAULT_SCHEMA));
  let deleted = 0;
  let batches = 0;
  while (batches < maxBatches) {
    const { rows } = await executor.query<{ n: number }>(sql, [olderThanMs, batchSize]);
    const n = rows[0]?.n ?? 0;
    batches += 1;
    deleted += n;
    if (n < batchSize) break;
  }
  return { deleted, batches };
}
