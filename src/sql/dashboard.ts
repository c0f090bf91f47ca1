/**
 * Queries behind the dashboard (SPEC §4.13). Both read dispatched history, so both are bounded
 * by time and served by `outbox_dispatched_at_idx` (migration 006): their cost follows the recent
 * traffic, never the table's size.
 */

/**
 * Messages dispatched since the previous sample ($1), for the published-rate chart, with the
 * server's clock so the next sample starts exactly where this one ended. `dispatched_at` is the
 * settling transaction's start time, so a settle that straddles a sample boundary is counted in
 * neither sample: a chart can live with that; counters for alerting come from the dispatcher's
 * own metrics instead. A NULL $1 (the first sample) counts nothing and just reads the clock.
 */
export const dispatchedSinceSql = (s: string) => `
SELECT now() AS at, count(*)::int AS n
FROM ${s}.outbox
WHERE dispatched_at > $1::timestamptz AND dispatched_at <= now()`;

/**
 * Latency histogram (created_at → dispatched_at) of the last hour's live messages, over the
 * newest $1 of them at most: an hour at a thousand messages a second is 3.6 million rows, and a
 * histogram does not need them all. `width_bucket` with the bucket edges $2 (ascending, first 0)
 * returns the 1-based bucket; edges[i] <= latency < edges[i+1], the last bucket is open-ended.
 */
export const latencyHistogramSql = (s: string) => `
WITH recent AS (
  SELECT extract(epoch FROM dispatched_at - created_at)::float8 AS seconds
  FROM ${s}.outbox
  WHERE dispatched_at >= now() - interval '1 hour' AND NOT shadow
  ORDER BY dispatched_at DESC
  LIMIT $1
)
SELECT width_bucket(greatest(seconds, 0), $2::float8[]) AS bucket, count(*)::int AS n
FROM recent
GROUP BY 1
ORDER BY 1`;
