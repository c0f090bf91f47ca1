/**
 * The consumer ledger on MySQL 8 and MariaDB 10.6+ (src/stores/mysql/mysql-ledger.ts): the same
 * tables and semantics as Postgres's (src/sql/consumer-ledger.ts, src/sql/consumer-positions.ts),
 * in InnoDB. Every value is a `?` parameter.
 *
 * What differs from Postgres, and why:
 * - No `RETURNING` (MySQL 8 has none for INSERT/UPDATE), and no affected-row count to tell an
 *   insert from a no-op upsert (mysql2 connects with CLIENT_FOUND_ROWS, so an unchanged duplicate
 *   reports 1 row, like an insert). So "did this transaction record the message?" is answered by
 *   a plain INSERT and its duplicate-key error (errno 1062), and claim-first decides under a
 *   locking read of the row (`FOR UPDATE`) in a short transaction of its own.
 * - Times are `DATETIME(6)` in UTC, written with `UTC_TIMESTAMP(6)` (the server's clock, whatever
 *   the session's time zone), so all processes compare against one clock, to the microsecond.
 * - A claim's fencing token is its lease end as text (`CAST(lease_expires_at AS CHAR)`, to the
 *   microsecond): a later claim always ends later, so an old holder's renew or release matches
 *   nothing — Postgres's token is the same instant as epoch microseconds.
 * - `VALUES(col)` in `ON DUPLICATE KEY UPDATE`: MySQL 8.0.20+ deprecates it (with a warning) in
 *   favour of a row alias that MariaDB does not parse; VALUES() works on both.
 * - Identifiers are `utf8mb4_bin`, case-sensitive like Postgres text.
 */

/** The ledger's tables, created if missing (idempotent). */
export const ledgerTablesSql = [
  `CREATE TABLE IF NOT EXISTS processed_messages (
  consumer         VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  message_id       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  state            VARCHAR(16)  NOT NULL DEFAULT 'done',
  processed_at     DATETIME(6)  NOT NULL,
  lease_expires_at DATETIME(6)  NULL,
  PRIMARY KEY (consumer, message_id),
  KEY processed_messages_processed_at_idx (processed_at),
  CONSTRAINT processed_messages_state CHECK (state IN ('claimed', 'done'))
) ENGINE = InnoDB`,
  `CREATE TABLE IF NOT EXISTS consumer_positions (
  consumer      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  aggregate_id  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  last_sequence BIGINT       NOT NULL DEFAULT 0,
  updated_at    DATETIME(6)  NOT NULL,
  PRIMARY KEY (consumer, aggregate_id),
  CONSTRAINT consumer_positions_sequence CHECK (last_sequence >= 0)
) ENGINE = InnoDB`,
];

/** The server error number of a duplicate primary key: another delivery recorded it first. */
export const DUPLICATE_KEY_ERRNO = 1062;

/**
 * The server error number of a deadlock. Two first claims of one message under REPEATABLE READ
 * (the server's default) both take a gap lock with {@link lockLedgerRowSql} on the missing row,
 * and then both insert: InnoDB rolls one of them back whole — it lost the race, like a
 * duplicate key, and goes round again.
 */
export const DEADLOCK_ERRNO = 1213;

/**
 * Transactional mode, first statement of the handler's transaction. The primary key makes it a
 * lock as well as a record: a second delivery inserting concurrently waits for the first
 * transaction, then fails with a duplicate key if it committed (a duplicate: the handler does not
 * run) or inserts if it rolled back. InnoDB rolls back only the failed statement, not the
 * transaction. ?: consumer, message id.
 */
export const recordDoneSql = `
INSERT INTO processed_messages (consumer, message_id, state, processed_at)
VALUES (?, ?, 'done', UTC_TIMESTAMP(6))`;

/**
 * Claim-first: the message's ledger row, locked for the rest of the claim's transaction, with
 * what is left of its lease in µs (negative: ended). No row locks nothing: two first claims
 * both insert, and the second's duplicate key sends it round again. ?: consumer, message id.
 */
export const lockLedgerRowSql = `
SELECT state,
       TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_expires_at) AS remaining_us
  FROM processed_messages
 WHERE consumer = ? AND message_id = ?
   FOR UPDATE`;

/** The state of one message, without locking. ?: consumer, message id. */
export const ledgerStateSql = `
SELECT state FROM processed_messages WHERE consumer = ? AND message_id = ?`;

/** Claim-first: a new claim. ?: consumer, message id, lease (µs). */
export const insertClaimSql = `
INSERT INTO processed_messages (consumer, message_id, state, processed_at, lease_expires_at)
VALUES (?, ?, 'claimed', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)`;

/**
 * Claim-first: takes over a claim whose lease ended (found by {@link lockLedgerRowSql} in the
 * same transaction). ?: lease (µs), consumer, message id.
 */
export const takeOverClaimSql = `
UPDATE processed_messages
   SET lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
       processed_at = UTC_TIMESTAMP(6)
 WHERE consumer = ? AND message_id = ? AND state = 'claimed'`;

/**
 * Extends a claim held by the token (checked under {@link claimTokenSql}'s lock first, and again
 * here); never shortens it. ?: lease (µs), consumer, message id, token.
 */
export const renewClaimSql = `
UPDATE processed_messages
   SET lease_expires_at = GREATEST(lease_expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
 WHERE consumer = ? AND message_id = ? AND state = 'claimed'
   AND lease_expires_at = CAST(? AS DATETIME(6))`;

/**
 * The token of a claimed row (its lease end, to the µs), locked for the rest of the transaction:
 * renew compares it with the caller's before it extends the lease. ?: consumer, message id.
 */
export const claimTokenSql = `
SELECT DATE_FORMAT(lease_expires_at, '%Y-%m-%d %H:%i:%s.%f') AS token
  FROM processed_messages
 WHERE consumer = ? AND message_id = ? AND state = 'claimed'
   FOR UPDATE`;

/**
 * Claim-first: the effect happened. Not fenced on purpose, as on Postgres: whoever performed the
 * effect may record it. ?: consumer, message id.
 */
export const completeClaimSql = `
UPDATE processed_messages
   SET state = 'done', processed_at = UTC_TIMESTAMP(6), lease_expires_at = NULL
 WHERE consumer = ? AND message_id = ?`;

/** Claim-first: frees the message for the next delivery now. ?: consumer, message id, token. */
export const releaseClaimSql = `
DELETE FROM processed_messages
 WHERE consumer = ? AND message_id = ? AND state = 'claimed'
   AND lease_expires_at = CAST(? AS DATETIME(6))`;

/**
 * Makes sure the position row exists, and locks it (a no-op update still takes the row's lock),
 * so {@link lockPositionSql} has a row to lock: `FOR UPDATE` on a missing row would let two
 * first deliveries of an aggregate both pass the order check. ?: consumer, aggregate id.
 */
export const ensurePositionSql = `
INSERT INTO consumer_positions (consumer, aggregate_id, last_sequence, updated_at)
VALUES (?, ?, 0, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE last_sequence = last_sequence`;

/**
 * Locks the aggregate's position for the rest of the transaction: deliveries of the same
 * aggregate to the same consumer serialise here. ?: consumer, aggregate id.
 */
export const lockPositionSql = `
SELECT last_sequence FROM consumer_positions WHERE consumer = ? AND aggregate_id = ? FOR UPDATE`;

/** Reads the position without locking; no row means 0. ?: consumer, aggregate id. */
export const readPositionSql = `
SELECT last_sequence FROM consumer_positions WHERE consumer = ? AND aggregate_id = ?`;

/** Moves the position forward, never back, creating the row if needed. ?: consumer, aggregate, sequence. */
export const advancePositionSql = `
INSERT INTO consumer_positions (consumer, aggregate_id, last_sequence, updated_at)
VALUES (?, ?, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE last_sequence = GREATEST(last_sequence, VALUES(last_sequence)),
                        updated_at = VALUES(updated_at)`;
