/**
 * SQL of the dedupe keys (migration 013: `outbox_dedupe_keys`, the trigger that drops a
 * duplicate). `s` is the validated, quoted schema name.
 */

/**
 * The first messages of keys whose messages the insert dropped, read after the insert. A
 * statement of its own, sent only when something was dropped: under READ COMMITTED it takes a
 * fresh snapshot, so it sees a key that a concurrent transaction committed while our insert
 * waited on it — a CTE of the insert itself (one round trip less) would read the insert's own,
 * older snapshot and find nothing. Keys travel as one jsonb array, like the insert's batch (array
 * parameters depend on each driver's encoding). A PK probe per key. $1 jsonb array of keys.
 */
export const firstOfKeysSql = (s: string) => `
SELECT dedupe_key AS "dedupeKey",
       message_id::text AS "messageId",
       id::text AS id,
       sequence::text AS sequence,
       topic,
       aggregate_id AS "aggregateId"
FROM ${s}.outbox_dedupe_keys
WHERE dedupe_key IN (SELECT jsonb_array_elements_text($1::jsonb))`;

/**
 * `enqueue(…, { onDuplicate: 'reject' })` writes nothing when it throws: the insert runs inside
 * a savepoint, rolled back when a key was a duplicate (that also releases the key row's lock the
 * trigger took), released otherwise. Two round trips more, paid only by calls that ask to reject.
 * Rejected: checking the keys before the insert (a concurrent writer can commit one in between),
 * and deleting the rows afterwards (their aggregates' sequence counters would stay advanced).
 */
export const dedupeSavepointSql = 'SAVEPOINT agent_outbox_dedupe';
export const dedupeRollbackSql = 'ROLLBACK TO SAVEPOINT agent_outbox_dedupe';
export const dedupeReleaseSql = 'RELEASE SAVEPOINT agent_outbox_dedupe';

/**
 * One batch of key pruning (retention job), returning how many keys it deleted: expired keys,
 * oldest expiry first, at most $1. The `expires_at` index serves the filter and the order, so a
 * batch costs its size. An expired key no longer deduplicates anything (the trigger takes it
 * over), so deleting it changes no answer; `SKIP LOCKED` leaves a key a writer is taking over.
 */
export const pruneDedupeKeysBatchSql = (s: string) => `
WITH batch AS (
  SELECT dedupe_key FROM ${s}.outbox_dedupe_keys
   WHERE expires_at <= now()
   ORDER BY expires_at
   LIMIT $1
   FOR UPDATE SKIP LOCKED
), gone AS (
  DELETE FROM ${s}.outbox_dedupe_keys k USING batch WHERE k.dedupe_key = batch.dedupe_key
  RETURNING 1
)
SELECT count(*)::int AS n FROM gone`;

/** Dry run of key pruning: how many keys have expired (`outbox prune --dry-run`). */
export const countExpiredDedupeKeysSql = (s: string) => `
SELECT count(*)::int AS n FROM ${s}.outbox_dedupe_keys WHERE expires_at <= now()`;
