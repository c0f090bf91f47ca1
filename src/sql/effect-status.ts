import { laneOfMessageIdSql, rowIdOfMessageIdSql, uuidVersionSql } from './lane-message-ids.js';

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
 * The lookup, bounded by the ids asked whatever retention keeps (lane-effect-status-bound.test.ts):
 * - `$2` row ids (as the lanes writer returns `id`): a primary-key probe per lane (the lane is a
 *   hash of the aggregate, unknown here);
 * - `$1` message ids of version 8 (every id the writer gives since migration 030) name their
 *   row: one primary-key probe at the lane and id decoded from the id (sql/lane-message-ids.ts);
 * - other message ids (version 7: written before migration 030) through
 *   `outbox_lane_v7_ids`, which 030 filled with their places (primary key `message_id`);
 * - a row is answered only if its message id is one asked (or its row id is): a forged or foreign
 *   version 8 id that decodes to a real row's place reads not-found, as an unknown id does.
 * The parked, ahead and decision rows are primary-key probes.
 *
 * Tried and measured (2026-12-06, on the 2-core machine shared with other runs, load 5–8; the
 * enqueue is a benchmark target, `enqueue_vs_pgq`):
 * - a sequential scan of `outbox_lane_messages` for any id not held, as before 030 (the
 *   decision rows' unique index found held ones): 54 buffers beside 2,000 messages, 446 beside
 *   20,000, 3,588 beside 100,000;
 * - a btree on `outbox_lane_messages (message_id)`: +1.7 to +2.9 µs a 2-row INSERT (blocks of
 *   100 alternated inside one server call, medians of 60) and +80 bytes of WAL a message (333–341
 *   vs 249–260); through `enqueue()`, alternated blocks of 100 business transactions, +7 and
 *   +13 µs of the backend's CPU a transaction in two runs, -1 in a third: below what this
 *   machine resolves, but never less than the index's own work;
 * - a partial btree on the rows whose id is not version 8 (the old rows; no new row enters it):
 *   +1.8 to +3.2 µs a statement all the same (the index is opened and its predicate compiled
 *   each statement), though no WAL;
 * - this shape: no index on the hot table; the version 8 id costs the writer less than the
 *   `outbox_uuid_v7()` default did (1.0–1.3 vs 3.0–4.2 µs an id: no random bytes). Through
 *   `enqueue()` on the same tables, this writer against the previous one: -2.1 and -3.0 µs of
 *   the backend's CPU a business transaction, wall time 1.008 and 0.997 of it (60 and 30
 *   alternated blocks of 100): no cost measurable.
 *
 * `before030`: a schema before migration 030 (no `outbox_lane_v7_ids`) reads the version 8 ids
 * the same way, but a version 7 id not held is a scan of the table, as before.
 *
 * $1 message ids (uuid[]), $2 row ids (bigint[]), $3 tenant id or NULL.
 */
export const laneMessagesStatusSql = (s: string, before030 = false) => `
WITH found AS (
  SELECT ${laneOfMessageIdSql('u.id')} AS lane, ${rowIdOfMessageIdSql('u.id')} AS id
  FROM unnest($1::uuid[]) u (id) WHERE ${uuidVersionSql('u.id')} = 8
  UNION
  ${
    before030
      ? `SELECT m.lane, m.id FROM ${s}.outbox_lane_messages m
  WHERE m.message_id = ANY (ARRAY(
    SELECT u.id FROM unnest($1::uuid[]) u (id)
    WHERE ${uuidVersionSql('u.id')} <> 8
      AND NOT EXISTS (SELECT 1 FROM ${s}.outbox_lane_approvals a WHERE a.message_id = u.id)))
  UNION
  SELECT a.lane, a.id FROM ${s}.outbox_lane_approvals a WHERE a.message_id = ANY ($1::uuid[])`
      : `SELECT o.lane, o.id FROM ${s}.outbox_lane_v7_ids o WHERE o.message_id = ANY ($1::uuid[])`
  }
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
WHERE (m.message_id = ANY ($1::uuid[]) OR m.id = ANY ($2::bigint[]))
  AND ($3::text IS NULL OR m.headers->>'tenant_id' = $3)`;
