/**
 * Gives claimed messages back WITHOUT an attempt and with a later `available_at` (issue 27): a
 * message of a paused route (sql/route-pauses.ts) or one that found no token of its rate limit
 * (sql/rate-limits.ts). Like `releaseSql` (settle.ts) it clears the lease and gives back the
 * attempt the claim counted; unlike it, the message then waits: a head leaves the due range of
 * `outbox_ready_idx` until its time, so no claim reads it again before then (a paused route's
 * backlog is claimed about once per pause, not at every claim). Ordered messages keep their
 * order: a deferred head still blocks its aggregate, and the dispatcher releases what it claimed
 * behind it. The new time enters the lane (`outbox_lane_enter`, sql/lane.ts) like a retry's
 * backoff. Also used for a message whose publish failed BECAUSE its destination was down: that
 * failure is the route's, not the message's, and is not charged.
 *
 * Fenced by `lease_owner = $1`. The delays are looked up per row from the two arrays (as the
 * settle looks up errors), so the UPDATE walks the primary key for `= ANY($2)`.
 *
 * $1 lease owner token, $2 row ids (bigint[]), $3 delays in ms (float8[], same order).
 */
export const deferSql = (schema: string) => `
UPDATE ${schema}.outbox o
SET lease_owner = NULL,
    lease_expires_at = NULL,
    attempts = greatest(o.attempts - 1, 0),
    available_at = greatest(
      o.available_at,
      now() + (SELECT d.delay FROM unnest($2::bigint[], $3::float8[]) AS d(id, delay)
               WHERE d.id = o.id) * interval '1 millisecond')
WHERE o.id = ANY ($2::bigint[])
  AND o.lease_owner = $1
  AND num_nulls(o.dispatched_at, o.dead_lettered_at) = 2
RETURNING o.id::text AS id`;
