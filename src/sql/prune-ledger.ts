/**
 * One batch of ledger retention, returning how many rows it deleted: done rows older than the cut-off, oldest first, at most $2 rows.
 * The `processed_at` index serves both the filter and the order, so a batch costs its size, not
 * the table's. `claimed` rows are never pruned: their effect may still be in flight.
 * Tried and rejected: one unbounded DELETE (long lock and a WAL burst on a large ledger) and
 * `DELETE ... LIMIT` (not Postgres syntax).
 */
export const pruneLedgerBatchSql = (s: string) => `
WITH gone AS (
DELETE FROM ${s}.processed_messages
 WHERE (consumer, message_id) IN (
   SELECT consumer, message_id
     FROM ${s}.processed_messages
    WHERE state = 'done'
      AND processed_at < now() - $1::float8 * interval '1 millisecond'
    ORDER BY processed_at
    LIMIT $2
 )
RETURNING 1
)
SELECT count(*)::int AS n FROM gone`;
