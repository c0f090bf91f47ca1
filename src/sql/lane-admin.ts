/**
 * What an operator reads and does on the lanes engine (migration 024; src/lanes/lane-admin.ts
 * runs these): dead letters, their replay, and each lane's state. None of them is on the
 * dispatch path, but each is bounded by what it reports (failures, or the backlog), never by the
 * history of `outbox_lane_messages`, which is append-only and grows for good.
 */

/**
 * Dead letters, oldest first, with their messages. Starts from `outbox_lane_parked_dead_idx`
 * (`dead_at` WHERE dead_at IS NOT NULL), so it reads dead rows only, not the failures still being
 * retried nor what parks behind them; each message is one primary-key probe `(lane, id)`.
 * `outbox_lane_messages` has no index on `message_id` or `topic` (one index on the hot row:
 * migration 024), so the topic filter is applied to the joined rows, which are dead letters
 * already. $1 topic LIKE pattern or NULL, $2 limit.
 */
export const listLaneDeadSql = (s: string) => `
SELECT p.lane || ':' || p.id AS id, m.message_id::text AS "messageId", m.topic,
       m.aggregate_id AS "aggregateId", m.sequence::text AS sequence, p.attempts,
       p.last_error AS "lastError", m.created_at AS "createdAt", p.dead_at AS "deadLetteredAt",
       m.payload
FROM ${s}.outbox_lane_parked p
JOIN ${s}.outbox_lane_messages m ON m.lane = p.lane AND m.id = p.id
WHERE p.dead_at IS NOT NULL
  AND ($1::text IS NULL OR m.topic LIKE $1)
ORDER BY p.dead_at, p.lane, p.id
LIMIT $2`;

/**
 * Replay: a dead letter becomes a due head again (attempts 0, due now, same message id), so the
 * dispatcher's parked path publishes it at its next look, whoever owns the lane.
 *
 * - `head = true` for every replayed row: under `hold` the dead row is still its aggregate's
 *   head; under `skip`, and for an unordered message, it is not (head means "due once
 *   available"), and it must become one to be read by `laneDueSql` at all.
 * - `blocks` is left as it is. Under `hold` the dead row kept blocking its aggregate, and its
 *   publish then promotes the next parked one (`outbox_lane_settle_parked`). Under `skip` it
 *   stopped blocking when it died and its aggregate went on: it is published out of band, after
 *   messages of its aggregate that came later — the order `skip` chose when it let them pass.
 *   Making it block again would park the aggregate's new messages behind an old one, and if
 *   another row of the aggregate is head already, give it two heads.
 * - Through `outbox_lane_parked_dead_idx`; a message id is matched on the joined message (no
 *   index on `message_id`: see above), so the cost is that of the dead letters, not of history.
 *
 * $1 message ids (uuid[]), $2 all dead (boolean), $3 topic LIKE pattern or NULL.
 */
export const replayLaneDeadSql = (s: string) => `
UPDATE ${s}.outbox_lane_parked p
SET dead_at = NULL, attempts = 0, available_at = now(), head = true
FROM ${s}.outbox_lane_messages m
WHERE p.dead_at IS NOT NULL
  AND m.lane = p.lane AND m.id = p.id
  AND (m.message_id = ANY($1::uuid[]) OR $2::boolean)
  AND ($3::text IS NULL OR m.topic LIKE $3)
RETURNING p.lane || ':' || p.id AS id, m.message_id::text AS "messageId", m.topic`;

/**
 * Each lane: its cursor, lease, backlog and parked rows, in one statement (one snapshot: the
 * numbers add up).
 *
 * - The backlog is counted through the primary key, `id > cursor` within the lane: a range scan
 *   that reads the messages after the cursor and nothing before it, so its cost is the backlog's
 *   (16 short scans), not the table's. A `count(*)` of the table less the consumed would read
 *   every message ever written. It includes messages that will park behind a failed aggregate
 *   when the cursor reaches them, and messages above the horizon: a cursor does not pass an id
 *   an older transaction may still commit below, so while one runs, what its owner already
 *   published above the cursor (and remembers in memory) is still counted here.
 * - The oldest backlog message is the first after the cursor, one probe of the same index.
 * - Parked rows are grouped once over `outbox_lane_parked`, which holds failures and what waits
 *   behind them only. Before a batch's outcome is committed (the next call commits it) a parked
 *   row can be above its lane's cursor; it is then counted as parked and not as backlog.
 */
export const laneStatusSql = (s: string) => `
SELECT l.lane, l.cursor::text AS cursor, l.owner, l.lease_expires_at AS "leaseExpiresAt",
       coalesce(l.lease_expires_at > now(), false) AS leased,
       (SELECT count(*) FROM ${s}.outbox_lane_messages m
        WHERE m.lane = l.lane AND m.id > l.cursor
          AND NOT EXISTS (SELECT 1 FROM ${s}.outbox_lane_parked q
                          WHERE q.lane = m.lane AND q.id = m.id))::int AS backlog,
       coalesce(extract(epoch FROM now() - (
         SELECT m.created_at FROM ${s}.outbox_lane_messages m
         WHERE m.lane = l.lane AND m.id > l.cursor ORDER BY m.id LIMIT 1)), 0)::float8
         AS "oldestBacklogAgeSeconds",
       coalesce(p.waiting, 0)::int AS parked,
       coalesce(p.retrying, 0)::int AS retrying,
       coalesce(p.dead, 0)::int AS "deadLetters"
FROM ${s}.outbox_lanes l
LEFT JOIN (
  SELECT q.lane,
         count(*) FILTER (WHERE NOT q.head AND q.dead_at IS NULL) AS waiting,
         count(*) FILTER (WHERE q.head AND q.dead_at IS NULL) AS retrying,
         count(*) FILTER (WHERE q.dead_at IS NOT NULL) AS dead
  FROM ${s}.outbox_lane_parked q
  GROUP BY q.lane
) p ON p.lane = l.lane
ORDER BY l.lane`;
