/**
 * Queries behind the dashboard on the lanes engine (`outbox ui --engine lanes`). The lanes engine
 * writes nothing per published message (no `dispatched_at`), so the published rate and the
 * commit-to-publish latency come from the lane cursors: what a cursor passed between two samples
 * was consumed between them.
 */

/**
 * One sample of the lanes: each lane's cursor now, and what it passed since the previous sample's
 * cursor ($1 lanes, $2 their previous cursors; a lane not in $1 counts nothing and just reports
 * its cursor). One statement, so the cursors and the rows below them are one snapshot: a cursor
 * is written only once every id below it is final (the dispatcher's horizon), so the rows of
 * (previous, cursor] are all there, and the next sample starts where this one ended. No window
 * is lost or counted twice, whatever commits while the sample runs; the claim engine needed the
 * settled horizon of sql/dashboard.ts for that, a cursor does not.
 *
 * Per lane:
 * - `passed`: messages of (previous, cursor], counted within a window of $3 ids from the previous
 *   cursor, through the primary key (a range: what every plan reads is bounded, as in
 *   `laneEngineStatusSql`). A cursor that moved further is estimated from the window's density
 *   (the caller scales by `(cursor - previous) / $3`). The lanes share one id sequence, so the 16
 *   windows together hold about $3 messages when the lanes are busy alike, 16 × $3 at worst.
 * - `parkedPassed`: the rows of the same window that are parked now (a failure, a deferral, a
 *   delay, what waits behind a failure): passed, not published.
 * - `parkedBehind`: parked rows at or below the cursor that are not dead, and `deadLetters` (all
 *   lanes, one number). A parked row leaves only when it is published (the settle deletes it; a
 *   dead letter stays, a replay keeps the row), so what the lanes published since the previous
 *   sample is `passed - (growth of parkedBehind + deadLetters)`: the retries, deferrals and what
 *   waited behind a failure are counted when they go out, a dead letter never. A sum that comes
 *   out below zero (a dead letter above its cursor is counted before the cursor passes it) is
 *   carried into the next samples by the caller.
 *   Bounded: from the lane's first parked row that is not dead and its last one at or below the
 *   cursor, each walked past the dead rows a row at a time (an unfiltered `LIMIT 1` of the
 *   primary key: every plan serves it from the index) at most $4 steps, counted when they lie
 *   within $4 ids (a range); else NULL, and the caller counts `passed - parkedPassed` (what
 *   went out from the parked rows is then not counted) and says the figure is estimated. Dead
 *   letters through `outbox_lane_parked_dead_idx`, at most $4 + 1 (its order and the `LIMIT`
 *   make the planner walk it); past $4 the same. A `count(*)` of a `LIMIT`ed range of the
 *   primary key was tried first: with statistics older than the parked rows the planner chose a
 *   bitmap scan of the whole lane and a sort: 6,000 parked rows read (5,001 parked) for a
 *   limit of 100.
 * - `buckets` and `parkedBuckets`: the latency histogram of the window's messages (not shadow)
 *   and of its parked rows, as `{bucket: count}` with `width_bucket` over the edges $6 (as
 *   `latencyHistogramSql`). The latency is `now() - created_at`: the message went out between
 *   the previous sample and this one, so this is an upper bound (by up to an interval, plus the
 *   up to a second a dispatcher keeps its cursors in memory). Parked rows in the window are one
 *   probe of the messages' key each (failures: few, and at most the window's), not a probe of the
 *   parked table per message.
 *
 * Rejected: a `LEFT JOIN` of the parked table per message (a probe per message read: the status
 * read measured 47 ms for 10,000 with `NOT EXISTS`); `pg_stat_user_tables.n_tup_del` of the
 * parked table for the settled parked rows (cumulative and cheap, but flushed by each backend up
 * to a second late, counts aborted deletes, and is reset by `pg_stat_reset`).
 *
 * $5 is the lane count (migration 024: 16), as `laneEngineStatusSql` (without statistics the
 * planner takes `outbox_lanes` for 940 rows).
 */
export const laneSampleSql = (s: string) => `
SELECT l.lane, l.cursor::text AS cursor,
       (extract(epoch FROM now()) * 1000)::float8 AS at,
       coalesce(w.passed, 0)::int AS passed, coalesce(w.parked, 0)::int AS "parkedPassed",
       w.buckets, w.parked_buckets AS "parkedBuckets",
       pb.counted AS "parkedBehind",
       (SELECT count(*) FROM (
          SELECT 1 FROM ${s}.outbox_lane_parked q WHERE q.dead_at IS NOT NULL
          ORDER BY q.dead_at LIMIT $4 + 1) d)::int AS "deadLetters"
FROM (SELECT lane, cursor FROM ${s}.outbox_lanes ORDER BY lane LIMIT $5) l
LEFT JOIN unnest($1::smallint[], $2::bigint[]) AS p (lane, cursor) ON p.lane = l.lane
LEFT JOIN LATERAL (
  WITH all_rows AS (
    SELECT CASE WHEN m.shadow THEN 0
                ELSE width_bucket(greatest(extract(epoch FROM now() - m.created_at), 0)::float8,
                                  $6::float8[]) END AS b,
           count(*) AS n
    FROM ${s}.outbox_lane_messages m
    WHERE m.lane = l.lane AND m.id > p.cursor AND m.id <= least(l.cursor, p.cursor + $3)
    GROUP BY 1
  ), parked_rows AS (
    SELECT CASE WHEN m.shadow THEN 0
                ELSE width_bucket(greatest(extract(epoch FROM now() - m.created_at), 0)::float8,
                                  $6::float8[]) END AS b,
           count(*) AS n
    FROM ${s}.outbox_lane_parked q
    JOIN ${s}.outbox_lane_messages m ON m.lane = q.lane AND m.id = q.id
    WHERE q.lane = l.lane AND q.id > p.cursor AND q.id <= least(l.cursor, p.cursor + $3)
    GROUP BY 1
  )
  SELECT (SELECT sum(n) FROM all_rows) AS passed, (SELECT sum(n) FROM parked_rows) AS parked,
         (SELECT jsonb_object_agg(b, n) FROM all_rows WHERE b > 0) AS buckets,
         (SELECT jsonb_object_agg(b, n) FROM parked_rows WHERE b > 0) AS parked_buckets
) w ON l.cursor > p.cursor
-- The first parked row that is not dead, walked a row at a time past the dead ones (each step
-- an unfiltered LIMIT 1 of the primary key, which every plan serves from the index), at most $4
-- steps; \`unknown\` when the walk gave up on a dead row.
LEFT JOIN LATERAL (
  WITH RECURSIVE walk (id, dead, steps) AS (
    (SELECT q.id, q.dead_at IS NOT NULL, 1 FROM ${s}.outbox_lane_parked q
     WHERE q.lane = l.lane ORDER BY q.id LIMIT 1)
    UNION ALL
    SELECT n.id, n.dead, w.steps + 1 FROM walk w
    CROSS JOIN LATERAL (
      SELECT q.id, q.dead_at IS NOT NULL AS dead FROM ${s}.outbox_lane_parked q
      WHERE q.lane = l.lane AND q.id > w.id ORDER BY q.id LIMIT 1) n
    WHERE w.dead AND w.steps < $4
  )
  SELECT (SELECT walk.id FROM walk WHERE NOT walk.dead LIMIT 1) AS id,
         (SELECT bool_and(walk.dead) AND max(walk.steps) >= $4 FROM walk) AS unknown
) pf ON true
-- The last one at or below the cursor, the same way down.
LEFT JOIN LATERAL (
  WITH RECURSIVE walk (id, dead, steps) AS (
    (SELECT q.id, q.dead_at IS NOT NULL, 1 FROM ${s}.outbox_lane_parked q
     WHERE q.lane = l.lane AND q.id <= l.cursor ORDER BY q.id DESC LIMIT 1)
    UNION ALL
    SELECT n.id, n.dead, w.steps + 1 FROM walk w
    CROSS JOIN LATERAL (
      SELECT q.id, q.dead_at IS NOT NULL AS dead FROM ${s}.outbox_lane_parked q
      WHERE q.lane = l.lane AND q.id < w.id ORDER BY q.id DESC LIMIT 1) n
    WHERE w.dead AND w.steps < $4
  )
  SELECT (SELECT walk.id FROM walk WHERE NOT walk.dead LIMIT 1) AS id,
         (SELECT bool_and(walk.dead) AND max(walk.steps) >= $4 FROM walk) AS unknown
) pt ON pf.id IS NOT NULL AND pf.id <= l.cursor
-- Counted when they lie within $4 ids of each other (a range: bounded whatever the plan), else
-- NULL (unknown).
LEFT JOIN LATERAL (
  SELECT CASE
           WHEN coalesce(pf.unknown, false) THEN NULL
           WHEN pf.id IS NULL OR pf.id > l.cursor THEN 0
           WHEN coalesce(pt.unknown, false) OR pt.id >= pf.id + $4 THEN NULL
           ELSE (SELECT count(*) FROM ${s}.outbox_lane_parked q
                 WHERE q.lane = l.lane AND q.id >= pf.id AND q.id <= pt.id
                   AND q.dead_at IS NULL)::int
         END AS counted
) pb ON true
ORDER BY l.lane`;

/**
 * The "Last errors" panel on lanes: failed heads still retrying, newest first (dead letters are in
 * their own panel, as on the claim engine). Through `outbox_lane_parked_due_idx` (head, not dead):
 * the failures, not what waits behind them nor the backlog. $1 limit.
 */
export const laneRetryingErrorsSql = (s: string) => `
SELECT q.lane || ':' || q.id AS id, m.message_id::text AS "messageId", m.topic,
       m.aggregate_id AS "aggregateId", q.attempts, q.last_error AS "lastError", false AS dead
FROM ${s}.outbox_lane_parked q
JOIN ${s}.outbox_lane_messages m ON m.lane = q.lane AND m.id = q.id
WHERE q.head AND q.dead_at IS NULL AND q.last_error IS NOT NULL
ORDER BY q.id DESC
LIMIT $1`;
