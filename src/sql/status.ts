/**
 * What `outbox status` shows. Every count is over undispatched rows only, so each query is served
 * by a partial index and costs what the backlog costs, not what the table's history costs.
 * One statement, so the numbers are from one snapshot and add up.
 *
 * Held messages (migration 010) are not backlog: a message waiting for a person is no dispatch
 * lag, and would otherwise age the oldest-pending gauge by days. They are counted apart — waiting
 * (not past their expiry), rejected, expired (the sweep's, or past due and not swept yet) — and
 * rejected or expired ones, dead-lettered to keep them out of the claim, are not dead letters.
 * A message whose deadline approves it (`approval_on_expiry = 'approve'`, migration 013) is still
 * waiting when past due and not swept yet: the sweep will approve it, not expire it.
 */
const PENDING = `dead_lettered_at IS NULL AND approval_state IS DISTINCT FROM 'awaiting'`;
const APPROVES_AT_EXPIRY = `approval_on_expiry IS NOT DISTINCT FROM 'approve'`;
const WAITING = `approval_state = 'awaiting' AND (approval_expires_at > now() OR ${APPROVES_AT_EXPIRY})`;

export const statusSql = (schema: string) => `
SELECT
  count(*) FILTER (WHERE ${PENDING})::int AS backlog,
  coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE ${PENDING})), 0)::float8
    AS "oldestPendingAgeSeconds",
  count(*) FILTER (WHERE ${PENDING} AND available_at <= now()
                   AND (lease_expires_at IS NULL OR lease_expires_at <= now()))::int AS "dueNow",
  count(*) FILTER (WHERE ${PENDING} AND lease_expires_at > now())::int AS "inFlight",
  count(*) FILTER (WHERE ${PENDING} AND available_at > now())::int AS scheduled,
  count(*) FILTER (WHERE dead_lettered_at IS NOT NULL
                     AND coalesce(approval_state, '') NOT IN ('rejected', 'expired'))::int
    AS "deadLetters",
  count(*) FILTER (WHERE ${WAITING})::int AS "awaitingApproval",
  coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE ${WAITING})), 0)::float8
    AS "oldestAwaitingApprovalAgeSeconds",
  count(*) FILTER (WHERE approval_state = 'rejected')::int AS rejected,
  count(*) FILTER (WHERE approval_state = 'expired'
                      OR (approval_state = 'awaiting' AND approval_expires_at <= now()
                          AND NOT ${APPROVES_AT_EXPIRY}))::int
    AS expired
FROM ${schema}.outbox
WHERE dispatched_at IS NULL`;

export const attemptsDistributionSql = (schema: string) => `
SELECT attempts, count(*)::int AS messages
FROM ${schema}.outbox
WHERE dispatched_at IS NULL
GROUP BY attempts
ORDER BY attempts`;

export const lastErrorsSql = (schema: string) => `
SELECT id::text AS id, message_id::text AS "messageId", topic, aggregate_id AS "aggregateId",
       attempts, last_error AS "lastError", dead_lettered_at IS NOT NULL AS dead
FROM ${schema}.outbox
WHERE dispatched_at IS NULL AND last_error IS NOT NULL
ORDER BY id DESC
LIMIT $1`;

/**
 * Shadow vs live per topic since a point in time (retrofit comparison). Reads dispatched history,
 * so unlike the queries above it is NOT bounded by the backlog: `outbox status --shadow` runs it
 * on request only, over a window ($1 seconds) that the caller keeps small.
 */
export const shadowComparisonSql = (schema: string) => `
SELECT topic,
       count(*) FILTER (WHERE shadow)::int AS shadow,
       count(*) FILTER (WHERE NOT shadow)::int AS live,
       count(*) FILTER (WHERE shadow AND dispatched_at IS NOT NULL)::int AS "shadowDispatched",
       count(*) FILTER (WHERE NOT shadow AND dispatched_at IS NOT NULL)::int AS "liveDispatched"
FROM ${schema}.outbox_messages
WHERE created_at >= now() - $1::float8 * interval '1 second'
GROUP BY topic
ORDER BY topic`;

/**
 * {@link shadowComparisonSql} on the lanes engine: `outbox_lane_messages` created in the window,
 * per topic; "dispatched" is what the engine counts as published (at or below its lane's cursor
 * and not parked, or published ahead for a tenant's share: migration 028). A shadow message is
 * settled as published without reaching a publisher, as on the claim engine. The table has no
 * index on `created_at` (none on the hot row but the primary key and `message_id`), so this reads
 * what retention keeps of it: on request only, as the claim engine's comparison.
 */
export const laneShadowComparisonSql = (schema: string) => `
SELECT m.topic,
       count(*) FILTER (WHERE m.shadow)::int AS shadow,
       count(*) FILTER (WHERE NOT m.shadow)::int AS live,
       count(*) FILTER (WHERE m.shadow AND d.published)::int AS "shadowDispatched",
       count(*) FILTER (WHERE NOT m.shadow AND d.published)::int AS "liveDispatched"
FROM ${schema}.outbox_lane_messages m
JOIN ${schema}.outbox_lanes l ON l.lane = m.lane
CROSS JOIN LATERAL (
  SELECT NOT EXISTS (SELECT 1 FROM ${schema}.outbox_lane_parked p
                     WHERE p.lane = m.lane AND p.id = m.id)
         AND (m.id <= l.cursor
              OR EXISTS (SELECT 1 FROM ${schema}.outbox_lane_ahead x
                         WHERE x.lane = m.lane AND x.id = m.id)) AS published
) d
WHERE m.created_at >= now() - $1::float8 * interval '1 second'
GROUP BY m.topic
ORDER BY m.topic`;

/**
 * How many claim-engine messages wait unpublished (pending, in flight or held for approval; not
 * dead letters), counted up to $1: what `outbox dispatch --engine lanes` tells at its start, and
 * whether the lane dispatcher must look for lanes messages that would overtake one of them
 * within an aggregate (lane-dispatcher.ts `#behindClaimEngine`, $1 = 1; docs/lanes.md, "Moving
 * from the claim engine"). Published rows leave `outbox` at their settle (migration 018), so
 * this reads what waits there, and at most $1 rows of it.
 */
export const claimEngineUnpublishedSql = (schema: string) => `
SELECT count(*)::int AS n FROM (
  SELECT 1 FROM ${schema}.outbox
  WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL
  LIMIT $1
) waiting`;

/**
 * The claim engine's unpublished messages (pending, in flight or held; dead letters left out),
 * at most $1 of them, as each aggregate's first sequence, with how many rows were read: the
 * lane dispatcher defers a lanes message that would overtake one (lane-dispatcher.ts
 * `#behindClaimEngine`). Read once every few seconds and kept, rather than probed per batch:
 * a probe of the pending index per aggregate of each batch read that aggregate's dead entries
 * again and again (3,767 buffers for 500 aggregates after 2,000 claim-engine messages dispatched
 * under a held REPEATABLE READ snapshot, 24,656 after 20,000, every batch). `rows` above the
 * cap means the list is cut short: the caller then takes every ordered aggregate as waiting.
 */
export const claimEnginePendingAggregatesSql = (schema: string) => `
WITH waiting AS (
  SELECT o.aggregate_id, o.sequence FROM ${schema}.outbox o
  WHERE o.dispatched_at IS NULL AND o.dead_lettered_at IS NULL
  LIMIT $1
)
SELECT w.aggregate_id AS "aggregateId", min(w.sequence)::text AS first,
       (SELECT count(*) FROM waiting)::int AS rows
FROM waiting w
GROUP BY w.aggregate_id`;
