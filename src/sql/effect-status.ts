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
