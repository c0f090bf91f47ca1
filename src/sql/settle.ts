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
 * Plan: the ids travel twice ($2 and $3) on purpose. The planner cannot see how many rows
 * jsonb_to_recordset returns (it assumes 100) and reads `lease_owner = $1` as very selective (most
 * rows have no owner); with those estimates the first version of this statement (a plain join
 * with the function) was planned as a sequential scan of the whole outbox plus a hash join on
 * every table up to ~100k rows, custom or generic plan, analyzed or not: at 1,000 msg/s on a fresh
 * outbox each settle took 1.2 ms and was the dispatcher's most expensive statement
 * (pg_stat_statements); at 20,000 rows a settle of 4 rows executed in 1.3–1.6 ms. `unnest` of a
 * constant array is estimated at the array's length, so the planner knows the batch size and
 * walks the primary key (2k–200k rows: 4 records 0.11–0.16 ms, 200 records 2–3 ms).
 * Tried: `o.id = ANY($3)` beside the join — the planner then put the function scan inside the
 * loop and expanded the jsonb once per row (200 records: 8–9 ms); a `LIMIT
 * jsonb_array_length($2)` on the function — a LIMIT only lowers an estimate, so batches over 100
 * records were planned as the sequential scan again. Not prepared (statement-name.ts): a generic
 * plan made while the table is tiny could be the sequential scan, and it would stay while the
 * table grows.
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
FROM jsonb_to_recordset($2::jsonb) AS s(id bigint, kind text, error text, "delayMs" float8),
     unnest($3::bigint[]) AS i(id)
WHERE o.id = i.id
  AND s.id = i.id
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
