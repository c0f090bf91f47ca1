import { commitModeClause, type CommitMode } from './commit-mode.js';

/**
 * Settles a whole batch in ONE statement: published rows get `dispatched_at`, failed rows get
 * their next `available_at` and `last_error`, dead rows get `dead_lettered_at`, and every row's
 * lease is cleared. The per-row decisions travel as one jsonb parameter (see insert-messages.ts
 * for why jsonb rather than arrays).
 *
 * Fencing: `WHERE lease_owner = $1`. The owner is unique per claim, so if our lease expired and
 * another dispatcher re-claimed the row, this statement no longer matches it and changes nothing:
 * the newer claim decides. Rows that were not re-claimed are still ours to settle even after
 * expiry — the publish did happen. The statement returns the ids it settled so the dispatcher can
 * count fenced-off rows.
 *
 * Plan: `o.id = ANY($3)` repeats the ids of $2 on purpose. The planner cannot see how many rows
 * jsonb_to_recordset returns (it assumes 100) but reads `lease_owner = $1` as very selective (most
 * rows have no owner), so without the array it scanned the whole outbox and hash-joined — up to a
 * table of ~100k rows, custom or generic plan, analyzed or not (EXPLAIN on 10k rows: Seq Scan, cost
 * 270; with the array: Index Scan on outbox_pkey, cost 13). Each settle then read every row: at
 * 1,000 msg/s on a fresh outbox it took 1.2 ms on average and was the dispatcher's most expensive
 * statement (pg_stat_statements). The array gives the planner the row count and a primary-key
 * path. Not prepared either (statement-name.ts): a generic plan made while the table is tiny can be
 * the sequential scan, and it would stay while the table grows.
 *
 * $1 lease owner token, $2 jsonb array of {id, kind: published|shadow|retry|dead, error, delayMs},
 * $3 the same ids as bigint[]. `shadow` settles like `published` (dispatched_at set); the row's
 * `shadow` column tells them apart.
 */
export const settleSql = (schema: string, commit: CommitMode = 'sync') => `
UPDATE ${schema}.outbox o
SET dispatched_at    = CASE WHEN s.kind IN ('published', 'shadow') THEN now() ELSE o.dispatched_at END,
    dead_lettered_at = CASE WHEN s.kind = 'dead' THEN now() ELSE o.dead_lettered_at END,
    available_at     = CASE WHEN s.kind = 'retry'
                            THEN now() + s."delayMs" * interval '1 millisecond'
                            ELSE o.available_at END,
    last_error       = CASE WHEN s.kind IN ('published', 'shadow') THEN o.last_error ELSE s.error END,
    lease_owner      = NULL,
    lease_expires_at = NULL
FROM jsonb_to_recordset($2::jsonb) AS s(id bigint, kind text, error text, "delayMs" float8)
WHERE o.id = s.id
  AND o.id = ANY($3::bigint[])
  AND o.lease_owner = $1${commitModeClause(commit)}
RETURNING o.id::text AS id`;

/**
 * Gives back leases of messages this claim never started publishing (graceful shutdown). Never
 * used for messages whose publish may be in flight: that would let another dispatcher publish
 * them concurrently (G3). Attempts are given back too, since no attempt was made.
 */
export const releaseSql = (schema: string, commit: CommitMode = 'sync') => `
UPDATE ${schema}.outbox
SET lease_owner = NULL, lease_expires_at = NULL, attempts = greatest(attempts - 1, 0)
WHERE lease_owner = $1 AND id = ANY($2::bigint[]) AND dispatched_at IS NULL${commitModeClause(commit)}`;
