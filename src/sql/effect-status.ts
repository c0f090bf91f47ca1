/**
 * What the effect status (src/admin/effect-status.ts, the agent's `effectStatusTool`) reads. Every
 * statement is bounded by the ids it is given (primary-key or unique-index probes), never by the
 * table: an agent may call it on every turn.
 */

/**
 * The messages, by message id (`outbox_message_id_key`, and the dispatched log's lookup function,
 * migration 021: the `message_id` index of each per-message table and the GiST index on each
 * batch table's range, dispatched-log.ts), of one tenant when `$2` is given (their `tenant_id`
 * header): another tenant's message is simply not found, as an unknown id is.
 * A held message's `available_at` is `infinity` (migration 010), reported as no time at all.
 * `beforeBatches`: a schema before migration 021 (no lookup function) reads the view
 * `outbox_messages` instead, as this did before.
 *
 * $1 message ids (uuid[]), $2 tenant id or NULL.
 */
export const messagesStatusSql = (s: string, beforeBatches = false) => `
SELECT o.message_id::text AS "messageId",
       o.topic,
       o.aggregate_id AS "aggregateId",
       o.approval_state AS "approvalState",
       o.approval_expires_at AS "expiresAt",
       o.approval_on_expiry AS "onExpiry",
       o.approval_decided_by AS "decidedBy",
       o.approval_decided_at AS "decidedAt",
       o.approval_note AS note,
       o.dispatched_at AS "dispatchedAt",
       o.dead_lettered_at AS "deadLetteredAt",
       o.attempts,
       o.last_error AS "lastError",
       CASE WHEN o.available_at = 'infinity' THEN NULL ELSE o.available_at END AS "availableAt",
       coalesce(o.lease_expires_at > now(), false) AS "inFlight",
       now() AS now
FROM ${
  beforeBatches
    ? `${s}.outbox_messages o
WHERE o.message_id = ANY ($1::uuid[])
  AND`
    : `(
  SELECT * FROM ${s}.outbox WHERE message_id = ANY ($1::uuid[])
  UNION ALL
  SELECT * FROM ${s}.outbox_dispatched_by_message_id($1::uuid[])
) o
WHERE`
} ($2::text IS NULL OR o.headers->>'tenant_id' = $2)`;

/**
 * Which of the given consumers performed which of the messages: done rows of the consumer ledger
 * (`processed_messages`, primary key (consumer, message_id)), when the consumers share this
 * database. $1 consumer names (text[]), $2 message ids (text[]).
 */
export const performedSql = (s: string) => `
SELECT consumer, message_id AS "messageId", processed_at AS "processedAt"
FROM ${s}.processed_messages
WHERE consumer = ANY ($1::text[]) AND message_id = ANY ($2::text[]) AND state = 'done'
ORDER BY processed_at`;

/**
 * The lanes engine's messages (`engine: 'lanes'`), in the columns of {@link messagesStatusSql}
 * plus `published` (the lanes engine writes nothing when it publishes: no time is known). Where a
 * message stands, first match wins:
 * - its decision row (`outbox_lane_approvals`, migration 027): awaiting, rejected, expired;
 * - parked (`outbox_lane_parked`) with `dead_at`: dead; parked otherwise: pending or failed (its
 *   attempts, last error, next attempt);
 * - published ahead for a tenant's share (`outbox_lane_ahead`, migration 028), or at or below its
 *   lane's cursor: published;
 * - above the cursor: pending (never attempted; due at its `available_at`).
 *
 * The lookup: `$2` row ids (as the lanes writer returns `id`) are primary-key probes (one per
 * lane and id: the lane is a hash of the aggregate, unknown here); `$1` message ids go through
 * the unique index on `outbox_lane_messages.message_id` (migration 032; before it, a message id
 * that was not a held message's was a sequential scan of everything retention keeps). The
 * parked, ahead and decision rows are primary-key probes. A message retention deleted has no
 * row, as on the claim engine.
 *
 * $1 message ids (uuid[]), $2 row ids (bigint[]), $3 tenant id or NULL.
 */
export const laneMessagesStatusSql = (s: string) => `
WITH found AS (
  SELECT m.lane, m.id FROM ${s}.outbox_lane_messages m WHERE m.message_id = ANY ($1::uuid[])
  UNION
  SELECT l.lane, r.id FROM unnest($2::bigint[]) r (id) CROSS JOIN ${s}.outbox_lanes l
)
SELECT m.message_id::text AS "messageId",
       m.id::text AS id,
       m.topic,
       m.aggregate_id AS "aggregateId",
       a.state AS "approvalState",
       a.expires_at AS "expiresAt",
       a.on_expiry AS "onExpiry",
       a.decided_by AS "decidedBy",
       a.decided_at AS "decidedAt",
       a.note,
       NULL::timestamptz AS "dispatchedAt",
       p.dead_at AS "deadLetteredAt",
       coalesce(p.attempts, 0) AS attempts,
       p.last_error AS "lastError",
       CASE WHEN p.parked THEN nullif(p.available_at, 'infinity')
            WHEN a.state IS NOT NULL THEN a.available_at
            ELSE m.available_at END AS "availableAt",
       false AS "inFlight",
       p.parked IS NULL AND (x.ahead OR m.id <= l.cursor) AS published,
       now() AS now
FROM found f
-- Each a probe by primary key (LIMIT keeps the planner from joining whole tables instead).
CROSS JOIN LATERAL (
  SELECT * FROM ${s}.outbox_lane_messages m WHERE m.lane = f.lane AND m.id = f.id LIMIT 1
) m
CROSS JOIN LATERAL (
  SELECT l.cursor FROM ${s}.outbox_lanes l WHERE l.lane = m.lane LIMIT 1
) l
LEFT JOIN LATERAL (
  SELECT true AS parked, p.dead_at, p.attempts, p.last_error, p.available_at
  FROM ${s}.outbox_lane_parked p WHERE p.lane = m.lane AND p.id = m.id LIMIT 1
) p ON true
LEFT JOIN LATERAL (
  SELECT true AS ahead FROM ${s}.outbox_lane_ahead x WHERE x.lane = m.lane AND x.id = m.id LIMIT 1
) x ON true
LEFT JOIN LATERAL (
  SELECT * FROM ${s}.outbox_lane_approvals a WHERE a.id = m.id LIMIT 1
) a ON true
WHERE $3::text IS NULL OR m.headers->>'tenant_id' = $3`;
