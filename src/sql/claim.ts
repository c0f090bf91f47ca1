/**
 * Claims due messages: ONE statement, so the row locks taken by FOR UPDATE SKIP LOCKED live only
 * for the statement's implicit transaction (microseconds) and the lease written by the UPDATE is
 * what keeps other dispatchers away while we publish OUTSIDE any transaction.
 *
 * The reference article commits its SKIP LOCKED transaction and then publishes: the locks are
 * gone and a second dispatcher claims the same rows (SPEC §11). Holding the transaction open
 * across the publish instead would pin a connection per batch and hold back vacuum. A lease with
 * a per-claim owner token (fencing, see settle.ts) has neither problem.
 *
 * Eligibility:
 * - undispatched, not dead-lettered, due (`available_at <= now()`), not under a live lease;
 * - on ORDERED topics only the aggregate's oldest undispatched message is eligible ("head"): no
 *   undispatched message of the same aggregate on an ordered topic with a smaller sequence may
 *   exist. A message in flight, in backoff or (with the `hold` policy) dead-lettered therefore
 *   blocks its successors and nothing else.
 * - unordered topics ($3, LIKE patterns) skip the head check.
 *
 * Why `sequence` and not `id` or xid8: `sequence` is assigned by the insert trigger under a row
 * lock on the aggregate's counter (migration 001), so a transaction writing the same aggregate
 * waits for the earlier one to commit: sequence order is commit order, and a snapshot can never
 * see sequence n+1 without n. Ordering by `id` lets a late-committing transaction (id 100
 * committing after 101) be overtaken. The xid8/pg_snapshot_xmin approach (Watermill) keeps global
 * commit order but makes every reader wait behind the oldest open transaction of the whole
 * database, ordered or not, and cannot express "per aggregate"; we only need per-aggregate order.
 *
 * Attempts are counted at claim time, so a message whose publish crashes the dispatcher (kill -9
 * or OOM in the middle of a batch) still runs out of attempts instead of crash-looping forever.
 *
 * Cost: the scan walks `outbox_pending_idx` (partial: undispatched rows only) in due order; each
 * candidate's head check is one probe of `outbox_aggregate_pending_idx`. Non-head rows of deep
 * aggregates are visited and rejected, which is the price of a single statement; measured in bench/.
 *
 * $1 lease owner token, $2 batch size, $3 unordered LIKE patterns, $4 hold (dead letters block),
 * $5 lease in milliseconds.
 */
export const claimSql = (schema: string) => `
WITH due AS (
  SELECT o.id
  FROM ${schema}.outbox o
  WHERE o.dispatched_at IS NULL
    AND o.dead_lettered_at IS NULL
    AND o.available_at <= now()
    AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= now())
    AND (
      o.topic LIKE ANY ($3::text[])
      OR NOT EXISTS (
        SELECT 1
        FROM ${schema}.outbox p
        WHERE p.aggregate_id = o.aggregate_id
          AND p.sequence < o.sequence
          AND p.dispatched_at IS NULL
          AND NOT (p.topic LIKE ANY ($3::text[]))
          AND (p.dead_lettered_at IS NULL OR $4::boolean)
      )
    )
  ORDER BY o.available_at, o.id
  LIMIT $2
  FOR UPDATE OF o SKIP LOCKED
)
UPDATE ${schema}.outbox o
SET lease_owner = $1,
    lease_expires_at = now() + $5::float8 * interval '1 millisecond',
    attempts = o.attempts + 1
FROM due
WHERE o.id = due.id
RETURNING o.id::text AS "rowId",
          o.message_id::text AS id,
          o.topic,
          o.aggregate_id AS "aggregateId",
          o.sequence::text AS sequence,
          o.payload,
          o.headers,
          o.created_at AS "createdAt",
          o.attempts,
          o.shadow`;
