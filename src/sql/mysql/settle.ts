import { NOW_MS } from './clock.js';

/**
 * The settle of one claim, in ONE READ COMMITTED transaction of the store
 * (src/stores/mysql/mysql-outbox-store.ts), in this order:
 *
 * 1. {@link fenceSql} locks the claim's rows that still carry its lease token. A row whose lease
 *    expired and was claimed again carries another token: it is not returned, and nothing below
 *    touches it (fencing, G3). MySQL 8 has no `UPDATE ... RETURNING` (nor has MariaDB before
 *    11), so the rows settled are known from this locking read, not from the UPDATEs.
 * 2. One UPDATE per kind of settlement on the fenced ids: published, retried (one per delay:
 *    retries are rare), dead (`hold`: stays its aggregate's head; `skip`: leaves its chain as
 *    `ordered = 0`), released (the attempt the claim counted given back).
 * 3. {@link advanceHeadsSql} for the aggregates whose chain may have moved, then
 *    {@link parkedHeadsSql} and {@link unparkSql} for the same aggregates.
 *
 * Concurrent settles of one aggregate serialise on its `outbox_heads` row (step 3 locks it);
 * aggregates are locked in id order so two settles never deadlock on each other's heads.
 */

/** ? owner token, ? list of row ids. */
export const fenceSql = `
SELECT id, aggregate_id, ordered FROM outbox
 WHERE id IN (?) AND lease_owner = ? AND dispatched_at IS NULL
 ORDER BY id
 FOR UPDATE`;

/**
 * Published. Repeats the fence (`lease_owner = ?`): the store's fast path for a batch that was
 * all published runs this without {@link fenceSql} first, and knows every row was settled when
 * it changed as many rows as it was given (otherwise it rolls back and takes the general path).
 * ? list of row ids, ? owner token.
 */
export const publishedSql = `
UPDATE outbox
   SET dispatched_at = ${NOW_MS}, lease_owner = NULL, lease_expires_at = NULL
 WHERE id IN (?) AND lease_owner = ? AND dispatched_at IS NULL`;

/** Due again after its backoff. ? delay (ms), ? error, ? list of row ids. */
export const retrySql = `
UPDATE outbox
   SET available_at = ${NOW_MS} + ?, last_error = ?, lease_owner = NULL, lease_expires_at = NULL
 WHERE id IN (?)`;

/**
 * Dead-lettered. `parked = 0`: a replayed dead letter must be in the claim's range again, and one
 * that left its chain (`skip`) is unordered, which is never parked (claim.ts). ? 1 when it leaves its aggregate's chain (policy `skip`), ? error, ? id.
 */
export const deadSql = `
UPDATE outbox
   SET dead_lettered_at = ${NOW_MS}, last_error = ?,
       ordered = CASE WHEN ? = 1 THEN 0 ELSE ordered END,
       lease_owner = NULL, lease_expires_at = NULL, parked = 0
 WHERE id IN (?)`;

/** Never handed to the publisher: lease and the claim's attempt given back. ? list of row ids. */
export const releaseSql = `
UPDATE outbox
   SET lease_owner = NULL, lease_expires_at = NULL, attempts = GREATEST(attempts - 1, 0)
 WHERE id IN (?) AND lease_owner = ? AND dispatched_at IS NULL`;

/**
 * Moves the heads of the aggregates in the list: each one's next ordered message is its first
 * pending ordered one (a dead one under `hold` included: it still blocks), or — when it has none
 * — whatever sequence its writers take next.
 *
 * Why this never skips a message: sequences are taken under the aggregate's row lock and commit
 * in order (schema.ts), so every row this statement cannot see yet (committed after its
 * snapshot, or not at all) has a higher sequence than every row it can see, and than the
 * `last_sequence` it reads. The value computed is therefore never above the true head. It can be
 * below it (a settle that ran on an older snapshot), and `GREATEST` keeps the higher value: the
 * head only moves forward. Unordered messages take sequences too; when the head sits on one,
 * the settle of that message (any kind) runs this again and moves past it.
 *
 * Aggregates with no ordered message (`first_ordered_sequence IS NULL`) are left alone: their
 * implicit head is that column, set with their first ordered message. Why that is safe for the
 * unordered message being settled: an ordered message with a lower sequence committed before
 * it, so before this settle began, and this statement sees the column set; one with a higher
 * sequence is never waiting on it. So a workload of unordered messages writes no head rows.
 *
 * Tried: `next_sequence = settled sequence + 1` per published message — stuck behind an
 * unordered message that was published earlier, and needs a row per message, not per aggregate.
 * ? list of aggregate ids.
 */
export const advanceHeadsSql = `
INSERT INTO outbox_heads (aggregate_id, next_sequence)
SELECT a.aggregate_id,
       coalesce((SELECT min(p.sequence) FROM outbox p FORCE INDEX (outbox_chain_idx)
                  WHERE p.aggregate_id = a.aggregate_id
                    AND p.ordered = 1
                    AND p.dispatched_at IS NULL),
                a.last_sequence + 1)
  FROM outbox_aggregates a
 WHERE a.aggregate_id IN (?)
   AND a.first_ordered_sequence IS NOT NULL
 ORDER BY a.aggregate_id
ON DUPLICATE KEY UPDATE next_sequence = GREATEST(outbox_heads.next_sequence, VALUES(next_sequence))`;

/**
 * Finds the parked rows at the listed aggregates' heads (claim.ts, parked rows), after
 * {@link advanceHeadsSql} in the same transaction; {@link unparkSql} then puts them back in the
 * claim's range. The rows behind a head were parked by claims, and this is the one place a head
 * moves.
 *
 * A consistent read, not a locking one, on purpose: the row at a new head may be a writer's
 * insert not committed yet, and a locking read (or an UPDATE joining to it) would wait for that
 * business transaction — a settle must never wait for a writer. Such a row needs nothing: rows
 * are inserted unparked. Why a consistent read sees every row a claim parked: a claim parks only
 * under the lock of the aggregate's `outbox_heads` row (claim.ts `lockHeadsForParkingSql`), which
 * advanceHeadsSql took before this statement's snapshot; a claim that parked committed before
 * that, and a claim that did not have the lock parks nothing of this aggregate.
 * ? list of aggregate ids.
 */
export const parkedHeadsSql = `
SELECT o.id
  FROM outbox_heads h
  JOIN outbox o FORCE INDEX (outbox_aggregate_sequence_key)
    ON o.aggregate_id = h.aggregate_id AND o.sequence = h.next_sequence
 WHERE h.aggregate_id IN (?)
   AND o.parked = 1`;

/**
 * `GREATEST(available_at, now)`: a row enters the claim's range again with a key no earlier than
 * this statement's start, never below the claims' floor (floor.ts). So an unparked head sorts as
 * due from its unpark time, after rows that were due before it: the claim's order among
 * aggregates is by due time, and a head's due time is when it became claimable.
 * ? list of row ids from {@link parkedHeadsSql}.
 */
export const unparkSql = `
UPDATE outbox SET parked = 0, available_at = GREATEST(available_at, ${NOW_MS}) WHERE id IN (?)`;
