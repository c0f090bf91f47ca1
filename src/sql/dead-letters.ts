/**
 * Messages a person rejected, or that expired waiting for one (migration 010), are dead-lettered
 * to keep them out of the claim, but they are not dead letters: not listed, counted or replayed
 * as such — a replay would publish what was refused.
 */
const NOT_REFUSED = `coalesce(approval_state, '') NOT IN ('rejected', 'expired')`;

/** Dead letters: undispatched rows that stopped retrying. Uses `outbox_dead_letter_idx`. */
export const listDeadSql = (schema: string) => `
SELECT id::text AS id, message_id::text AS "messageId", topic, aggregate_id AS "aggregateId",
       sequence::text AS sequence, attempts, last_error AS "lastError",
       created_at AS "createdAt", dead_lettered_at AS "deadLetteredAt"
FROM ${schema}.outbox
WHERE dead_lettered_at IS NOT NULL AND dispatched_at IS NULL
  AND ${NOT_REFUSED}
  AND ($1::text IS NULL OR topic LIKE $1)
ORDER BY dead_lettered_at, id
LIMIT $2`;

/**
 * Replay: the dead letter becomes a fresh pending message (attempts 0, due now) with the same
 * message id, so consumers that did see an earlier publish still dedupe it. `last_error` is kept
 * as history until the next attempt overwrites it. Accepts row ids and message ids.
 *
 * `ready = true` (migration 009): a dead letter under `hold` is still its aggregate's head and
 * goes next; one dead-lettered under `skip` left the chain (`ordered = false`) and goes out
 * unordered. Either way the claim must be able to start from it — a message that died in the
 * middle of a run was never marked ready.
 * $1 row ids, $2 message ids, $3 all dead (boolean), $4 topic LIKE pattern or NULL.
 */
export const replaySql = (schema: string) => `
UPDATE ${schema}.outbox
SET dead_lettered_at = NULL, attempts = 0, available_at = now(), ready = true,
    lease_owner = NULL, lease_expires_at = NULL
WHERE dead_lettered_at IS NOT NULL
  AND dispatched_at IS NULL
  AND ${NOT_REFUSED}
  AND (id = ANY($1::bigint[]) OR message_id::text = ANY($2::text[]) OR $3::boolean)
  AND ($4::text IS NULL OR topic LIKE $4)
RETURNING id::text AS id, message_id::text AS "messageId", topic`;
