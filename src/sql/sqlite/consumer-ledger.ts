/**
 * The consumer ledger's statements on a SQLite file (src/stores/sqlite/sqlite-ledger.ts): the
 * same `processed_messages` and `consumer_positions` tables as D1's queue consumer (consumer.ts),
 * used from interactive transactions. Each ledger transaction is a `BEGIN IMMEDIATE`: SQLite runs
 * one write transaction at a time for the whole file, so inside one nothing else can record a
 * message or move a position — the row locks Postgres's ledger takes (src/sql/consumer-ledger.ts)
 * are the file's write lock here, and a read followed by a write is as safe as one statement.
 * Times are INTEGER ms (schema.ts).
 */

/**
 * Transactional mode, first statement of the handler's transaction: records the message as done,
 * or nothing when a delivery recorded it first (a duplicate: one row back means this transaction
 * owns the message). ?1 consumer, ?2 message id, ?3 now (ms).
 */
export const recordDoneSql = `
INSERT INTO processed_messages (consumer, message_id, state, processed_at)
VALUES (?1, ?2, 'done', ?3)
ON CONFLICT (consumer, message_id) DO NOTHING
RETURNING 1 AS recorded`;

/**
 * The ledger row of one message, for claim-first's decision: absent (claim it), done, or claimed
 * until `lease_expires_at` (held, or taken over once that has passed). ?1 consumer, ?2 message id.
 */
export const ledgerRowSql = `
SELECT state, lease_expires_at AS leaseExpiresAt
  FROM processed_messages
 WHERE consumer = ?1 AND message_id = ?2`;

/** Claim-first: a new claim. ?1 consumer, ?2 message id, ?3 now (ms), ?4 lease end (ms). */
export const insertClaimSql = `
INSERT INTO processed_messages (consumer, message_id, state, processed_at, lease_expires_at)
VALUES (?1, ?2, 'claimed', ?3, ?4)`;

/**
 * Claim-first: takes over a claim whose lease ended (its holder crashed between the effect and
 * `done`), or renews a live one. The lease end is the claim's fencing token, as on Postgres: a
 * later claim always ends later, so an old holder's renew or release matches nothing.
 * ?1 consumer, ?2 message id, ?3 now (ms), ?4 new lease end (ms), ?5 the token it must hold (the
 * current lease end).
 */
export const moveClaimSql = `
UPDATE processed_messages
   SET lease_expires_at = ?4, processed_at = ?3
 WHERE consumer = ?1 AND message_id = ?2 AND state = 'claimed' AND lease_expires_at = ?5`;

/**
 * Claim-first: the effect happened. Not fenced, as on Postgres: whoever performed the effect may
 * record it. ?1 consumer, ?2 message id, ?3 now (ms).
 */
export const completeClaimSql = `
UPDATE processed_messages
   SET state = 'done', processed_at = ?3, lease_expires_at = NULL
 WHERE consumer = ?1 AND message_id = ?2`;

/** Claim-first: frees the message for the next delivery now. ?1 consumer, ?2 message id, ?3 token. */
export const releaseClaimSql = `
DELETE FROM processed_messages
 WHERE consumer = ?1 AND message_id = ?2 AND state = 'claimed' AND lease_expires_at = ?3`;

/**
 * Moves the position forward, never back, creating the row if needed.
 * ?1 consumer, ?2 aggregate id, ?3 sequence, ?4 now (ms).
 */
export const advancePositionSql = `
INSERT INTO consumer_positions (consumer, aggregate_id, last_sequence, updated_at)
VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (consumer, aggregate_id) DO UPDATE
   SET last_sequence = max(last_sequence, excluded.last_sequence), updated_at = excluded.updated_at`;
