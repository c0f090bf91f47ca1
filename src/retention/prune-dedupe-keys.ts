import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import { pruneDedupeKeysBatchSql } from '../sql/dedupe.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/** What {@link pruneDedupeKeys} removed. */
export interface PruneDedupeKeysResult {
  /** Expired keys deleted from `outbox_dedupe_keys`. */
  removed: number;
  batches: number;
}

/**
 * Deletes expired dedupe keys (migration 013), `batchSize` per statement, each its own
 * transaction, until none is left (or `maxBatches`). A key expires at the end of its own window
 * (`dedupeWindowMs` when it was written), independently of the outbox retention: a key outlives
 * its message's row when the window is longer, and an expired key deduplicates nothing, so there
 * is no age option. The retention job runs it after the outbox and the ledger.
 *
 * @example
 * ```ts
 * const { removed } = await pruneDedupeKeys(fromPg(pool));
 * ```
 */
export async function pruneDedupeKeys(
  executor: SqlExecutor,
  options: { batchSize?: number; maxBatches?: number; schema?: string } = {},
): Promise<PruneDedupeKeysResult> {
  const sql = pruneDedupeKeysBatchSql(quoteIdentifier(options.schema ?? DEFAULT_SCHEMA));
  const batchSize = options.batchSize ?? 1000;
  const maxBatches = options.maxBatches ?? Infinity;
  let removed = 0;
  let batches = 0;
  while (batches < maxBatches) {
    const { rows } = await executor.query<{ n: number }>(sql, [batchSize]);
    const n = Number(rows[0]?.n ?? 0);
    batches += 1;
    removed += n;
    if (n < batchSize) break;
  }
  return { removed, batches };
}
