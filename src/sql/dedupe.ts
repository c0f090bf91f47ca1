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

/**
 * The lanes engine's dedupe keys (migration 026): the keys of a batch are admitted BEFORE its
 * messages are written, in one statement, into the same `outbox_dedupe_keys` as the claim
 * engine's (a key written by one engine deduplicates on the other: switching engines keeps every
 * window). Returns the keys admitted, each with the message id its message is then written with;
 * a key not returned is live (a duplicate), and its message is not written at all — its
 * aggregate's counter is never touched, so no sequence number is skipped (the claim engine gets
 * the same by claiming the key in a trigger that fires before the counter's).
 *
 * Why before, not in the insert: the lanes INSERT counts each aggregate's messages up front (one
 * counter upsert per aggregate, sql/lanes.ts), so a row dropped by a trigger would leave a gap.
 * The key row holds id 0 and no sequence until the insert fills them in, within the same
 * transaction: no other transaction sees it before.
 *
 * Concurrency, as the claim engine's trigger: a writer inserting a key that another transaction
 * holds uncommitted waits on the primary key until it ends. Committed: under READ COMMITTED the
 * DO UPDATE's WHERE is checked on the committed row, live, so nothing is returned (a duplicate,
 * no error). Rolled back: this writer admits it. Under REPEATABLE READ or SERIALIZABLE the
 * waiter fails with serialization_failure (40001). The writer sends the keys sorted (code-unit
 * order), so two batches taking the same keys take them in one order.
 *
 * $1 jsonb array of `{ k, t, a }` (key, topic, aggregate), $2 the window in ms.
 */
export const admitLaneDedupeKeysSql = (s: string) => `
INSERT INTO ${s}.outbox_dedupe_keys AS k
  (dedupe_key, message_id, id, topic, aggregate_id, expires_at)
SELECT e.value->>'k', ${s}.outbox_uuid_v7(), 0, e.value->>'t', e.value->>'a',
       now() + $2::float8 * interval '1 millisecond'
FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS e(value, position)
ORDER BY e.position
ON CONFLICT (dedupe_key) DO UPDATE
  SET message_id = EXCLUDED.message_id, id = EXCLUDED.id, topic = EXCLUDED.topic,
      aggregate_id = EXCLUDED.aggregate_id, sequence = NULL,
      created_at = now(), expires_at = EXCLUDED.expires_at
  WHERE k.expires_at <= now()
RETURNING k.dedupe_key AS "dedupeKey", k.message_id::text AS "messageId"`;
