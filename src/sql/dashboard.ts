/**
 * Queries behind the dashboard (SPEC §4.13). Those that read dispatched history read it through
 * `outbox_messages` (migration 018: the outbox and the ring of dispatched tables), bounded by
 * time: rows dispatched before migration 018 through `outbox_dispatched_at_idx` (migration 006),
 * the ring's through its BRIN index on `dispatched_at`. Their cost follows the recent traffic,
 * never the table's size.
 */

/**
 * The instant before which every settle that will ever be visible already is: the start of the
 * oldest other transaction of this database that is writing (holds an xid) or running a
 * statement (client backends: autovacuum's are not settles), else now(). A settle stamps `dispatched_at` with its transaction's start and commits
 * later, so a window ending at now() missed a settle in flight (neither this sample, which could
 * not see it, nor the next, which starts after its timestamp, counted it: the dashboard's e2e test
 * caught 0 of 25 once, CI 2026-12-06). Floored at a minute ago, so a long write transaction (a
 * migration, a bulk load) delays the rate chart by a minute at most instead of stopping it; a
 * settle running longer than that is missed. A held read-only snapshot has no xid and is idle, so
 * it delays nothing. Other roles' `xact_start` is NULL without `pg_read_all_stats`: then this is
 * now() and the old gap is back for their settles (docs/operations.md, "Dashboard").
 */
const settledHorizon = `least(now(), greatest(now() - interval '1 minute', coalesce((
  SELECT min(xact_start) FROM pg_stat_activity
  WHERE datname = current_database() AND pid <> pg_backend_pid()
    AND backend_type = 'client backend' AND (backend_xid IS NOT NULL OR state = 'active')
), now())))`;

/**
 * Messages dispatched since the previous sample ($1), for the published-rate chart, up to the
 * settled horizon (above), which the sample returns as its time so the next sample starts exactly
 * where this one ended: windows are half-open, [$1, at), so a settle is counted once. `at` never
 * goes back ($1 is its floor). `cursor` is `at` as text, the next sample's $1: a JS Date keeps
 * milliseconds, and a window starting at a truncated time counts again what the previous one did
 * in its last microseconds. A NULL $1 (the first sample without history) counts nothing and
 * just reads the clock.
 */
export const dispatchedSinceSql = (s: string) => `
WITH h AS (SELECT greatest($1::timestamptz, ${settledHorizon}) AS at)
SELECT h.at, h.at::text AS cursor, (SELECT count(*) FROM ${s}.outbox_messages
              WHERE dispatched_at >= $1::timestamptz AND dispatched_at < h.at)::int AS n
FROM h`;

/**
 * Latency histogram (created_at → dispatched_at) of the last hour's live messages, over the
 * newest $1 of them at most: an hour at a thousand messages a second is 3.6 million rows, and a
 * histogram does not need them all. `width_bucket` with the bucket edges $2 (ascending, first 0)
 * returns the 1-based bucket; edges[i] <= latency < edges[i+1], the last bucket is open-ended.
 */
export const latencyHistogramSql = (s: string) => `
WITH recent AS (
  SELECT extract(epoch FROM dispatched_at - created_at)::float8 AS seconds
  FROM ${s}.outbox_messages
  WHERE dispatched_at >= now() - interval '1 hour' AND NOT shadow
  ORDER BY dispatched_at DESC
  LIMIT $1
)
SELECT width_bucket(greatest(seconds, 0), $2::float8[]) AS bucket, count(*)::int AS n
FROM recent
GROUP BY 1
ORDER BY 1`;

/**
 * The charts' history at start-up: `outbox ui` used to sample from when it started, so its charts
 * began empty. This rebuilds the last $1 ms (the sampler's capacity × interval: what the charts
 * show) as points every $3 ms ending at the settled horizon (above; dispatches counted before it,
 * so the first live sample goes on from there), from the timestamps the rows already carry: a
 * message is backlog from `created_at` (an approved one from `approval_decided_at`; one held or
 * rejected/expired never was) until `dispatched_at` or `dead_lettered_at`, whichever came first.
 *
 * Bounded cost. Every row that was backlog at some point of the window is either still
 * undispatched (`dispatched_at IS NULL`: what `outbox status` reads, costs what the backlog
 * costs) or was dispatched inside the window: a range of `outbox_dispatched_at_idx` (migration
 * 006). That range is capped at the newest $2 dispatched rows: past that, the window starts at
 * the $2-th newest dispatch (an index-only step back of at most $2 entries, stopping at the
 * window's start) instead of $1 ago, so a busy
 * outbox gets a shorter history, never a slower start. One pass of events (+1 in, -1 out) and a
 * running sum per point, not a count per point: 720 points × N rows would be 720 scans.
 *
 * Not read: `outbox_archive`. Rows reach it only after `outbox prune --older-than` (default 30
 * days), so it holds rows dispatched in the window only if a prune runs with under an hour, and
 * it has no index on `dispatched_at` (range-reading it would be a full scan). Known gaps, fine
 * for a chart: a replayed dead letter counts as backlog for the time it was dead, and the
 * dead-letter series counts only messages that are dead letters now.
 */
export const chartHistorySql = (s: string) => `
WITH bounds AS (
  SELECT ${settledHorizon} AS until, $3::float8 * interval '1 millisecond' AS step,
         greatest(now() - $1::float8 * interval '1 millisecond',
                  coalesce((SELECT dispatched_at FROM ${s}.outbox_messages
                             WHERE dispatched_at IS NOT NULL AND dispatched_at <= now()
                               AND dispatched_at >= now() - $1::float8 * interval '1 millisecond'
                             ORDER BY dispatched_at DESC OFFSET $2 LIMIT 1), '-infinity')) AS since
), grid AS (
  SELECT until, step, since, floor(extract(epoch FROM until - since) * 1000 / $3::float8)::int AS last
  FROM bounds
), settled AS (
  SELECT o.created_at, o.dispatched_at, o.dead_lettered_at, o.approval_state, o.approval_decided_at
  FROM ${s}.outbox_messages o, bounds b
  WHERE o.dispatched_at IS NOT NULL AND o.dispatched_at >= b.since AND o.dispatched_at < b.until
), unsettled AS (
  SELECT created_at, dispatched_at, dead_lettered_at, approval_state, approval_decided_at
  FROM ${s}.outbox
  WHERE dispatched_at IS NULL
), tracked AS (
  SELECT CASE WHEN approval_state IS NULL THEN created_at
              WHEN approval_state = 'approved' THEN greatest(created_at, approval_decided_at)
         END AS entered,
         least(dispatched_at, dead_lettered_at) AS gone
  FROM (SELECT * FROM settled UNION ALL SELECT * FROM unsettled) r
), events AS (
  SELECT entered AS at, 1 AS backlog, 0 AS dead, 0 AS dispatched FROM tracked WHERE entered IS NOT NULL
  UNION ALL
  SELECT gone, -1, 0, 0 FROM tracked WHERE entered IS NOT NULL AND gone IS NOT NULL
  UNION ALL
  SELECT dead_lettered_at, 0, 1, 0 FROM unsettled
   WHERE dead_lettered_at IS NOT NULL AND coalesce(approval_state, '') NOT IN ('rejected', 'expired')
  UNION ALL
  SELECT dispatched_at, 0, 0, 1 FROM settled
), per_point AS (
  SELECT least(greatest(ceil(extract(epoch FROM e.at - (g.until - g.last * g.step)) * 1000
                             / $3::float8), 0), g.last)::int AS i,
         sum(e.backlog) AS backlog, sum(e.dead) AS dead, sum(e.dispatched) AS dispatched
  FROM events e, grid g
  WHERE e.at <= g.until
  GROUP BY 1
)
SELECT (extract(epoch FROM g.until - (g.last - i) * g.step) * 1000)::float8 AS at,
       g.until::text AS until,
       (sum(coalesce(p.backlog, 0)) OVER w)::int AS backlog,
       (sum(coalesce(p.dead, 0)) OVER w)::int AS "deadLetters",
       coalesce(p.dispatched, 0)::int AS dispatched
FROM grid g
CROSS JOIN generate_series(0, g.last) AS i
LEFT JOIN per_point p USING (i)
WINDOW w AS (ORDER BY i)
ORDER BY i`;

/**
 * The "Last errors" panel: errors of messages still retrying. Dead letters are left out because
 * the dead-letter panel above it lists each with its last error (they were shown twice). The
 * predicate is `outbox_pending_idx`'s (migration 001), so this reads the backlog, not history.
 */
export const retryingErrorsSql = (s: string) => `
SELECT id::text AS id, message_id::text AS "messageId", topic, aggregate_id AS "aggregateId",
       attempts, last_error AS "lastError", false AS dead
FROM ${s}.outbox
WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL AND last_error IS NOT NULL
ORDER BY id DESC
LIMIT $1`;
