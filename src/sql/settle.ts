import { commitModeClause, type CommitMode } from './commit-mode.js';

/**
 * Settles the messages that went out (published, or shadow: settled without publishing) — the
 * common case, usually a whole batch: `dispatched_at = now()` and the lease cleared. Fenced by
 * `lease_owner = $1` like `settleFailedSql`; returns the ids it settled.
 *
 * One table, the ids as an array: the planner sees how many there are (a constant array, planned
 * per call) and walks the primary key at every table size, and there is no join to misplan. The
 * general statement below joins the outbox with the records of a jsonb parameter; whatever we
 * gave the planner about that join, some table state produced a bad plan: a sequential scan of
 * the whole outbox on tables up to ~100k rows (the first version, for 4-row batches: 1.3–1.6 ms
 * at 20,000 rows instead of ~0.15), the jsonb expanded again for every row (`o.id = ANY` beside
 * the join: 8–9 ms for 200 records instead of 2–3), or the ids array scanned again for every row
 * (a join with `unnest` of the ids, next to 5,000,000 dispatched rows: 5.7 ms per 200-row settle
 * instead of 2.7, `history_scaling` 0.71–0.95). Measured with pg_stat_statements and auto_explain
 * (docs/latency.md).
 *
 * $1 lease owner token, $2 row ids (bigint[]).
 */
export const settleDoneSql = (schema: string, commit: CommitMode = 'sync') => `
UPDATE ${schema}.outbox
SET dispatched_at    = now(),
    lease_owner      = NULL,
    lease_expires_at = NULL
WHERE id = ANY($2::bigint[])
  AND lease_owner = $1${commitModeClause(commit)}
RETURNING id::text AS id`;

/**
 * Settles the messages that failed, in ONE statement (the ones that went out take
 * `settleDoneSql`): retried rows get their next `available_at`, dead rows `dead_lettered_at`, both
 * `last_error`, and every row's lease is cleared. The per-row decisions travel as one jsonb
 * parameter (see insert-messages.ts for why jsonb rather than arrays).
 *
 * Fencing: `WHERE lease_owner = $1`. The owner is unique per claim, so if our lease expired and
 * another dispatcher re-claimed the row, this statement no longer matches it and changes nothing:
 * the newer claim decides. Rows that were not re-claimed are still ours to settle even after
 * expiry — the publish did happen. The statement returns the ids it settled so the dispatcher can
 * count fenced-off rows.
 *
 * Plan: the ids travel twice ($2 and $3) on purpose: `unnest` of a constant array is estimated
 * at its length, which the planner cannot know of jsonb_to_recordset (it assumes 100) — without it
 * a small batch on a table up to ~100k rows was planned as a sequential scan of the outbox. Next
 * to millions of rows the planner can still choose to rescan the array per row (see
 * `settleDoneSql`), which is why only failed messages, normally few, go through this statement.
 * Not prepared (statement-name.ts): a generic plan made while the table is tiny could be the
 * sequential scan, and it would stay while the table grows.
 *
 * $1 lease owner token, $2 jsonb array of {id, kind: retry|dead, error, delayMs}, $3 the same ids
 * as bigint[].
 */
export const settleFailedSql = (schema: string, commit: CommitMode = 'sync') => `
UPDATE ${schema}.outbox o
SET dead_lettered_at = CASE WHEN s.kind = 'dead' THEN now() ELSE o.dead_lettered_at END,
    available_at     = CASE WHEN s.kind = 'retry'
                            THEN now() + s."delayMs" * interval '1 millisecond'
                            ELSE o.available_at END,
    last_error       = s.error,
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
