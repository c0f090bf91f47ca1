import { LANE_DECISION_LOCK_CLASS } from './lanes.js';

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
 * `outbox_lane_messages` has no index on `topic` (an index on the hot row costs every enqueue),
 * so the topic filter is applied to the joined rows, which are dead letters already. $1 topic
 * LIKE pattern or NULL, $2 limit.
 */
export const listLaneDeadSql = (s: string) => `
SELECT p.lane || ':' || p.id AS id, m.message_id::text AS "messageId", m.topic,
       m.aggregate_id AS "aggregateId", m.sequence::text AS sequence, p.attempts,
       p.last_error AS "lastError", m.created_at AS "createdAt", p.dead_at AS "deadLetteredAt",
       m.payload, p.blocks AS blocking
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
 * - Through `outbox_lane_parked_dead_idx`, or from the message ids through the `message_id` index
 *   (migration 032): the cost is that of the dead letters or of the ids asked, not of history.
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
 * Skip (migration 030): dead letters that hold their ordered aggregate (dead-lettered under
 * `hold`) are given up, as if they had died under `skip`. Each stays a dead letter (never
 * published; `dead_at` kept, so `outbox dead list`, the gauge and the effect status still say
 * dead, and it can still be replayed, then on its own), stops being head and blocking, and the
 * next parked message of its aggregate becomes head, due now: the parked path publishes it and
 * the run behind it, in order (G4); later messages that the lane read reaches are read as usual.
 *
 * Why a function and not one UPDATE: the lane read parks an aggregate's later messages behind a
 * blocking row as it reads them, and a row parked behind the dead letter after a single
 * statement's snapshot would be left with no head, for good. So, as a decision on a held message
 * (sql/lane-approvals.ts): the lanes' decision lock is taken exclusively first (the row-by-row
 * read holds it shared while it parks), then each statement sees what committed before: the
 * blocking rows of the aggregate up to the dead letter are locked in id order (a replay or a
 * parked-path settle of the same aggregate waits, or is waited for), the row is changed, and
 * `outbox_lane_promote` names the head. Rejected: deleting the parked row (the message would
 * then count as published: at or below its cursor and not parked); a new state column (every
 * read of the parked table would have to learn it).
 *
 * The dead letters are found through `outbox_lane_parked_dead_idx`, a message id matched on the
 * joined message (or through the `message_id` index, migration 032), so the cost is that of the
 * dead letters. Returns those skipped; an unordered dead letter, or one dead under `skip`
 * already, blocks nothing and is not returned. READ COMMITTED only, as the decisions.
 */
export const laneSkipDeadFunctionSql = (s: string) => `
CREATE FUNCTION ${s}.outbox_lane_skip_dead(p_message_ids uuid[])
RETURNS TABLE (id text, "messageId" text, topic text, "aggregateId" text)
LANGUAGE plpgsql SET jit = off AS $$
#variable_conflict use_column
DECLARE
  v record;
  v_lane record;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'agent-outbox: skipping lane dead letters needs READ COMMITTED, this transaction runs %',
      current_setting('transaction_isolation');
  END IF;
  FOR v_lane IN
    SELECT DISTINCT p.lane FROM ${s}.outbox_lane_parked p
    JOIN ${s}.outbox_lane_messages m ON m.lane = p.lane AND m.id = p.id
    WHERE p.dead_at IS NOT NULL AND p.blocks AND m.message_id = ANY (p_message_ids)
    ORDER BY p.lane
  LOOP
    PERFORM pg_advisory_xact_lock(${LANE_DECISION_LOCK_CLASS}, v_lane.lane);
  END LOOP;
  FOR v IN
    SELECT p.lane, p.id, p.aggregate_id, m.message_id, m.topic FROM ${s}.outbox_lane_parked p
    JOIN ${s}.outbox_lane_messages m ON m.lane = p.lane AND m.id = p.id
    WHERE p.dead_at IS NOT NULL AND p.blocks AND m.message_id = ANY (p_message_ids)
    ORDER BY p.lane, p.id
  LOOP
    PERFORM 1 FROM ${s}.outbox_lane_parked b
    WHERE b.lane = v.lane AND b.aggregate_id = v.aggregate_id AND b.blocks AND b.id <= v.id
    ORDER BY b.id
    FOR UPDATE;
    UPDATE ${s}.outbox_lane_parked p SET head = false, blocks = false
    WHERE p.lane = v.lane AND p.id = v.id AND p.dead_at IS NOT NULL AND p.blocks;
    CONTINUE WHEN NOT FOUND;
    PERFORM ${s}.outbox_lane_promote(ARRAY[v.lane], ARRAY[v.aggregate_id]);
    id := v.lane || ':' || v.id;
    "messageId" := v.message_id::text;
    topic := v.topic;
    "aggregateId" := v.aggregate_id;
    RETURN NEXT;
  END LOOP;
END $$`;

/** One {@link laneSkipDeadFunctionSql} call: $1 message ids (uuid[]). */
export const skipLaneDeadSql = (s: string) =>
  `SELECT * FROM ${s}.outbox_lane_skip_dead($1::uuid[])`;

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
       coalesce(p.held, 0)::int AS held,
       coalesce(p.dead, 0)::int AS "deadLetters"
FROM ${s}.outbox_lanes l
LEFT JOIN (
  SELECT q.lane,
         count(*) FILTER (WHERE NOT q.head AND q.dead_at IS NULL
                            AND q.available_at < 'infinity') AS waiting,
         count(*) FILTER (WHERE q.head AND q.dead_at IS NULL
                            AND q.available_at < 'infinity') AS retrying,
         count(*) FILTER (WHERE q.dead_at IS NULL AND q.available_at = 'infinity') AS held,
         count(*) FILTER (WHERE q.dead_at IS NOT NULL) AS dead
  FROM ${s}.outbox_lane_parked q
  GROUP BY q.lane
) p ON p.lane = l.lane
ORDER BY l.lane`;

/**
 * The lanes engine's numbers behind `outbox status --engine lanes`, the Prometheus gauges and
 * `/healthz` (src/lanes/lane-engine-status.ts), in one statement: one snapshot, the numbers add
 * up. Run every 15 s by every dispatcher process that serves metrics, so what it reads is bounded
 * by $1 (a window of ids), whatever the backlog:
 *
 * - Per lane, the first message after the cursor and the lane's last message (two probes of the
 *   primary key, `LIMIT 1` each). The messages from the first one on are counted within $1 ids
 *   (`id >= first AND id < first + $1`, not parked). When the last message is inside the window
 *   the count is exact; past it, the rest is estimated from the window's density (counted × ids
 *   to the last / $1). The ids come from one sequence shared by the 16 lanes, so a lane's ids in
 *   a window are as dense as its share of the writes: the estimate holds while that share does.
 * - A window of ids, not a `LIMIT` of rows: a range bounds what every plan reads. A `LIMIT` is a
 *   bound only for a walk of the index in id order, and with statistics older than the backlog
 *   (new ids past the histogram) the planner chose a bitmap scan of the whole lane and a sort:
 *   2,080 rows read at a backlog of 2,000, 22,080 at 22,000, for a `LIMIT 50` (the functions of
 *   sql/lanes.ts turn bitmap scans off for this; a plain statement cannot). The cursors of busy
 *   lanes are close, so the windows overlap and about $1 rows are read in all; at worst (each
 *   lane's window full of its own ids) 16 × $1.
 * - Rejected: `laneStatusSql`'s exact `count(*)` reads every message of the backlog (a
 *   million-row backlog, a million rows every 15 s per process); `reltuples` knows the table,
 *   history included, not what is past a cursor.
 * - Parked rows (failures, and what waits behind a failed message of its aggregate: as many as
 *   the backlog when a destination is down) are counted the same way, per lane: from the first
 *   parked id that is not dead (the walk to it passes the lane's dead letters, failures) within
 *   $1 ids, through the primary key, scaled to the last such id past it
 *   (the backlog; the heads behind `dueNow` and `scheduled` are those of the window, a floor).
 *   Dead letters are counted through `outbox_lane_parked_dead_idx` (its order and a `LIMIT`
 *   $1, so that the planner walks it: without them, and without statistics, it read the whole
 *   parked table for them); past $1 the count is a floor (the alert is on > 0).
 * - The oldest pending message: the first after the cursor, and the first parked one that is not
 *   dead, per lane.
 *
 * $2 is the lane count (migration 024: 16).
 *
 * Messages after a cursor are all due: the lanes engine takes no delays (the writer refuses
 * them) and a batch in flight leases a lane, not rows, so nothing is "in flight" here. While a
 * writer's older transaction runs, a cursor waits for the horizon, and what its owner published
 * above it is still counted (as in `laneStatusSql`); a dispatcher writes its cursors at least
 * every second while busy, and when it goes idle.
 */
export const laneEngineStatusSql = (s: string) => `
WITH per_lane AS MATERIALIZED (
  SELECT l.lane, f.id AS first_id, f.created_at AS first_at, t.id AS top_id,
         coalesce(c.counted, 0) AS counted,
         pf.id AS parked_first, pt.id AS parked_top,
         coalesce(p.waiting, 0) AS waiting, coalesce(p.due_heads, 0) AS due_heads,
         coalesce(p.later_heads, 0) AS later_heads,
         (SELECT m.created_at FROM ${s}.outbox_lane_messages m
          WHERE m.lane = l.lane AND m.id = pf.id) AS parked_first_at
  -- LIMIT $2 (the lane count): without statistics the planner takes the 16 rows of
  -- outbox_lanes for 940, its estimate of every per-lane part 60 times too high, and the whole
  -- over jit_above_cost: JIT compilation then took 40 to 140 ms of a 3 ms statement.
  FROM (SELECT * FROM ${s}.outbox_lanes ORDER BY lane LIMIT $2) l
  LEFT JOIN LATERAL (
    SELECT m.id, m.created_at FROM ${s}.outbox_lane_messages m
    WHERE m.lane = l.lane AND m.id > l.cursor ORDER BY m.id LIMIT 1
  ) f ON true
  LEFT JOIN LATERAL (
    SELECT m.id FROM ${s}.outbox_lane_messages m
    WHERE m.lane = l.lane ORDER BY m.id DESC LIMIT 1
  ) t ON f.id IS NOT NULL
  -- Less the parked rows of the same window (a parked row is a message too): two range
  -- counts, not a probe of the parked table per message (NOT EXISTS: 47 ms for 10,000 rows).
  LEFT JOIN LATERAL (
    SELECT (SELECT count(*) FROM ${s}.outbox_lane_messages m
            WHERE m.lane = l.lane AND m.id >= f.id AND m.id < f.id + $1)
         - (SELECT count(*) FROM ${s}.outbox_lane_parked q
            WHERE q.lane = l.lane AND q.id >= f.id AND q.id < f.id + $1) AS counted
  ) c ON f.id IS NOT NULL
  -- The first and last parked rows that are not dead: a dead letter stays parked for good, and
  -- as the window's start it would leave later failures outside it. Walked a row at a time
  -- (each step an unfiltered LIMIT 1 of the primary key, which every plan serves from the
  -- index) past the dead ones, at most $1 steps: with the filter in one statement and no
  -- statistics, the planner read the whole lane's parked rows to sort them.
  LEFT JOIN LATERAL (
    WITH RECURSIVE walk (id, dead, steps) AS (
      (SELECT q.id, q.dead_at IS NOT NULL, 1 FROM ${s}.outbox_lane_parked q
       WHERE q.lane = l.lane ORDER BY q.id LIMIT 1)
      UNION ALL
      SELECT n.id, n.dead, w.steps + 1 FROM walk w
      CROSS JOIN LATERAL (
        SELECT q.id, q.dead_at IS NOT NULL AS dead FROM ${s}.outbox_lane_parked q
        WHERE q.lane = l.lane AND q.id > w.id ORDER BY q.id LIMIT 1) n
      WHERE w.dead AND w.steps < $1
    )
    SELECT walk.id FROM walk WHERE NOT walk.dead LIMIT 1
  ) pf ON true
  LEFT JOIN LATERAL (
    WITH RECURSIVE walk (id, dead, steps) AS (
      (SELECT q.id, q.dead_at IS NOT NULL, 1 FROM ${s}.outbox_lane_parked q
       WHERE q.lane = l.lane ORDER BY q.id DESC LIMIT 1)
      UNION ALL
      SELECT n.id, n.dead, w.steps + 1 FROM walk w
      CROSS JOIN LATERAL (
        SELECT q.id, q.dead_at IS NOT NULL AS dead FROM ${s}.outbox_lane_parked q
        WHERE q.lane = l.lane AND q.id < w.id ORDER BY q.id DESC LIMIT 1) n
      WHERE w.dead AND w.steps < $1
    )
    SELECT walk.id FROM walk WHERE NOT walk.dead LIMIT 1
  ) pt ON pf.id IS NOT NULL
  LEFT JOIN LATERAL (
    -- A held message (migration 027: awaiting, or rejected under hold) is parked due at
    -- infinity: not pending (as on the claim engine), counted by laneApprovalCountsSql.
    SELECT count(*) FILTER (WHERE NOT q.head AND q.dead_at IS NULL
                              AND q.available_at < 'infinity') AS waiting,
           count(*) FILTER (WHERE q.head AND q.dead_at IS NULL AND q.available_at <= now())
             AS due_heads,
           count(*) FILTER (WHERE q.head AND q.dead_at IS NULL AND q.available_at > now()
                              AND q.available_at < 'infinity') AS later_heads
    FROM ${s}.outbox_lane_parked q
    WHERE q.lane = l.lane AND q.id >= pf.id AND q.id < pf.id + $1
  ) p ON pf.id IS NOT NULL
), lanes AS (
  SELECT lane, first_at, parked_first_at, top_id >= first_id + $1 AS estimated,
         CASE
           WHEN first_id IS NULL THEN 0
           WHEN top_id < first_id + $1 THEN counted
           ELSE round(counted::numeric * (top_id - first_id + 1) / $1)
         END AS after_cursor,
         -- The parked rows' window scaled the same way.
         CASE
           WHEN parked_first IS NULL OR parked_top < parked_first + $1 THEN 1
           ELSE (parked_top - parked_first + 1)::numeric / $1
         END AS parked_scale,
         waiting, due_heads, later_heads
  FROM per_lane
)
SELECT round(sum(after_cursor) + sum((waiting + due_heads + later_heads) * parked_scale))
         ::bigint::text AS backlog,
       -- Heads as counted in the window (a floor when it is scaled): a scaled count of the few
       -- heads before a deep parked run would be wrong by the run's length.
       round(sum(after_cursor) + sum(due_heads))::bigint::text AS "dueNow",
       sum(later_heads)::bigint::text AS scheduled,
       coalesce(bool_or(estimated OR parked_scale > 1), false) AS "backlogEstimated",
       coalesce(extract(epoch FROM now() - least(min(first_at), min(parked_first_at))), 0)::float8
         AS "oldestPendingAgeSeconds",
       (SELECT count(*) FROM (
          SELECT 1 FROM ${s}.outbox_lane_parked q WHERE q.dead_at IS NOT NULL
          ORDER BY q.dead_at LIMIT $1) d)::bigint::text AS "deadLetters"
FROM lanes`;

/**
 * Pending messages of the lanes engine by attempts so far: the parked ones that are not dead
 * (failures and what waits behind them, not the backlog); what is after the cursors has none
 * (the caller adds it as attempts 0).
 */
export const laneAttemptsSql = (s: string) => `
SELECT attempts, count(*)::int AS messages
FROM ${s}.outbox_lane_parked
WHERE dead_at IS NULL AND available_at < 'infinity'
GROUP BY attempts
ORDER BY attempts`;

/**
 * The latest errors of the lanes engine: failed heads (retrying, through
 * `outbox_lane_parked_due_idx`) and dead letters (through `outbox_lane_parked_dead_idx`), newest
 * message first; what waits behind a failure has no error and is not read. $1 limit.
 */
export const laneLastErrorsSql = (s: string) => `
SELECT q.lane || ':' || q.id AS id, m.message_id::text AS "messageId", m.topic,
       m.aggregate_id AS "aggregateId", q.attempts, q.last_error AS "lastError",
       q.dead_at IS NOT NULL AS dead
FROM (
  (SELECT lane, id, attempts, last_error, dead_at FROM ${s}.outbox_lane_parked
   WHERE head AND dead_at IS NULL AND last_error IS NOT NULL)
  UNION ALL
  (SELECT lane, id, attempts, last_error, dead_at FROM ${s}.outbox_lane_parked
   WHERE dead_at IS NOT NULL AND last_error IS NOT NULL)
) q
JOIN ${s}.outbox_lane_messages m ON m.lane = q.lane AND m.id = q.id
ORDER BY q.id DESC
LIMIT $1`;
