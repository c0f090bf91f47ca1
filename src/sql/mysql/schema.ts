import { NOW_MS } from './clock.js';
import { ledgerTablesSql } from './consumer.js';

/**
 * The MySQL 8 / MariaDB 10.6+ schema (`agent-outbox/mysql`): the same logical tables and columns
 * as the Postgres and SQLite outboxes, in InnoDB.
 *
 * - `outbox` keeps the reference design's column names (`aggregate_id`, `topic`, `payload`,
 *   `headers`, `created_at`, `available_at`, `dispatched_at`, `attempts`, `last_error`) plus what
 *   the guarantees need: `message_id` (a UUID), `sequence`, the lease, `dead_lettered_at`,
 *   `ordered`. Times are BIGINT ms from the server's clock (clock.ts).
 * - `payload` and `headers` are LONGTEXT with JSON CHECKs, not MySQL's JSON type: MySQL 8 stores
 *   JSON in a binary form and hands back re-serialised text (keys reordered), MariaDB's JSON is
 *   LONGTEXT anyway; text keeps the payload byte for byte on both. CHECK constraints are enforced
 *   by MariaDB 10.2+ and MySQL 8.0.16+.
 * - Text identifiers are `utf8mb4_bin`: case-sensitive like Postgres, so `Order:1` and
 *   `order:1` are two aggregates and topic patterns match the same topics on every store.
 * - A BEFORE INSERT trigger makes a plain `INSERT INTO outbox (aggregate_id, topic, payload)`
 *   a message: it fills the message id, headers, times, and takes the sequence. The store's
 *   writer inserts through the same trigger, so there is one path to a sequence.
 * - Sequences: `outbox_aggregates` holds each aggregate's last sequence. The trigger's
 *   `INSERT ... ON DUPLICATE KEY UPDATE` takes that row's lock until the business transaction
 *   ends, so a second transaction writing the same aggregate waits for the first to commit or
 *   roll back: sequence order is commit order (SPEC G4), and a rollback gives its sequence back.
 * - `outbox_heads` holds, per aggregate, the sequence of its next ordered message to publish.
 *   Only settles move it (settle.ts); a claim only reads it, or writes the row of an aggregate
 *   with no row yet with the head it implicitly has (claim.ts `materializeHeadsSql`). Writers never touch
 *   it, so a long business transaction never blocks a dispatcher on it. Until a settle first
 *   writes an aggregate's row, its head is `outbox_aggregates.first_ordered_sequence`, which the
 *   trigger sets once, with the aggregate's first ordered message: an aggregate that only ever
 *   has unordered messages (mail about an order, say) never gets a row in `outbox_heads`.
 * - The columns the trigger fills have defaults (0, '') as well: MySQL checks an omitted NOT NULL
 *   column without a default before the trigger runs in some modes; MariaDB lets the trigger
 *   fill NULLs. The trigger treats NULL, 0 and '' as "not given".
 * - No partial indexes in InnoDB: `outbox_claim_idx` (migration 3; `outbox_pending_idx` before)
 *   leads with `dispatched_at`, `dead_lettered_at` and `parked`, so the claim's `IS NULL` on both
 *   and `parked = 0` are an equality prefix and its `ORDER BY available_at, id` reads the index
 *   in order. Dispatched rows and rows parked behind a blocked head sit in other parts of the
 *   index and are never read by a claim.
 *
 * DDL commits implicitly in MySQL, so a migration is not atomic: every statement is idempotent
 * (IF NOT EXISTS, DROP TRIGGER IF EXISTS then CREATE, or an ALTER whose repeat fails with one of
 * {@link ALREADY_APPLIED_ERRNOS}), and `migrateMysql` runs them under
 * `GET_LOCK` and records the version last. A crash half-way re-runs the migration safely.
 */
export interface MysqlMigration {
  version: number;
  name: string;
  statements: readonly string[];
}

export const MYSQL_MIGRATIONS: readonly MysqlMigration[] = [
  {
    version: 1,
    name: 'initial',
    statements: [
      `CREATE TABLE IF NOT EXISTS outbox_aggregates (
  aggregate_id           VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
  last_sequence          BIGINT NOT NULL,
  first_ordered_sequence BIGINT NULL
) ENGINE = InnoDB`,
      `CREATE TABLE IF NOT EXISTS outbox_heads (
  aggregate_id  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
  next_sequence BIGINT NOT NULL
) ENGINE = InnoDB`,
      `CREATE TABLE IF NOT EXISTS outbox (
  id               BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  message_id       CHAR(36) CHARACTER SET ascii NOT NULL DEFAULT '',
  aggregate_id     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  topic            VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  payload          LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  headers          LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT ('{}'),
  sequence         BIGINT NOT NULL DEFAULT 0,
  created_at       BIGINT NOT NULL DEFAULT 0,
  available_at     BIGINT NOT NULL DEFAULT 0,
  dispatched_at    BIGINT NULL,
  attempts         INT NOT NULL DEFAULT 0,
  last_error       TEXT CHARACTER SET utf8mb4 NULL,
  lease_owner      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  lease_expires_at BIGINT NULL,
  dead_lettered_at BIGINT NULL,
  ordered          TINYINT NOT NULL DEFAULT 1,
  CONSTRAINT outbox_payload_json CHECK (JSON_VALID(payload)),
  CONSTRAINT outbox_headers_object CHECK (JSON_TYPE(headers) = 'OBJECT'),
  CONSTRAINT outbox_aggregate_id_length CHECK (CHAR_LENGTH(aggregate_id) BETWEEN 1 AND 255),
  CONSTRAINT outbox_topic_length CHECK (CHAR_LENGTH(topic) BETWEEN 1 AND 255),
  CONSTRAINT outbox_attempts_positive CHECK (attempts >= 0),
  CONSTRAINT outbox_ordered_flag CHECK (ordered IN (0, 1)),
  UNIQUE KEY outbox_message_id_key (message_id),
  UNIQUE KEY outbox_aggregate_sequence_key (aggregate_id, sequence),
  KEY outbox_pending_idx (dispatched_at, dead_lettered_at, available_at, id),
  KEY outbox_chain_idx (aggregate_id, ordered, dispatched_at, sequence),
  KEY outbox_dead_letter_idx (dead_lettered_at, dispatched_at)
) ENGINE = InnoDB`,
      `CREATE TABLE IF NOT EXISTS outbox_unordered_topics (
  pattern    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
  created_at BIGINT NOT NULL
) ENGINE = InnoDB`,
      `DROP TRIGGER IF EXISTS outbox_before_insert`,
      // One statement (no DELIMITER needed through a driver). `ordered` NULL means "decide from
      // outbox_unordered_topics" (LIKE patterns made from globs, mysql-dispatcher.ts).
      `CREATE TRIGGER outbox_before_insert BEFORE INSERT ON outbox FOR EACH ROW
BEGIN
  DECLARE now_ms BIGINT DEFAULT ${NOW_MS};
  IF NEW.message_id IS NULL OR NEW.message_id = '' THEN SET NEW.message_id = UUID(); END IF;
  IF NEW.headers IS NULL THEN SET NEW.headers = '{}'; END IF;
  IF NEW.created_at IS NULL OR NEW.created_at = 0 THEN SET NEW.created_at = now_ms; END IF;
  IF NEW.available_at IS NULL OR NEW.available_at = 0 THEN SET NEW.available_at = now_ms; END IF;
  IF NEW.ordered IS NULL THEN
    SET NEW.ordered = NOT EXISTS (
      SELECT 1 FROM outbox_unordered_topics u WHERE NEW.topic LIKE u.pattern);
  END IF;
  INSERT INTO outbox_aggregates (aggregate_id, last_sequence) VALUES (NEW.aggregate_id, 1)
    ON DUPLICATE KEY UPDATE last_sequence = last_sequence + 1;
  SET NEW.sequence = (SELECT last_sequence FROM outbox_aggregates
                       WHERE aggregate_id = NEW.aggregate_id);
  IF NEW.ordered = 1 THEN
    UPDATE outbox_aggregates SET first_ordered_sequence = NEW.sequence
     WHERE aggregate_id = NEW.aggregate_id AND first_ordered_sequence IS NULL;
  END IF;
END`,
    ],
  },
  {
    // The consumer ledger's tables (consumer.ts), as Postgres's and SQLite's migrations carry
    // theirs: `outbox migrate` makes a database ready for a consumer too. Both are CREATE TABLE
    // IF NOT EXISTS, so a database whose ledger was made by createMysqlLedgerTables() first
    // migrates as well.
    version: 2,
    name: 'consumer-ledger',
    statements: [...ledgerTablesSql],
  },
  {
    // Rows queued behind a blocked head leave the claim's index range (claim.ts: `parked`).
    // Before, every claim read them again: 900 aggregates with a blocked head and 9 messages
    // behind each cost every claim of 50 about 9,400 rows and 20,000 page accesses
    // (test/integration/stores/mysql/mysql-claim-bound.test.ts). `outbox_claim_idx` replaces
    // `outbox_pending_idx` (the same columns with `parked` before the due time), so a write still
    // maintains one index for the claim. MySQL 8 has no `ADD COLUMN IF NOT EXISTS` nor
    // `DROP INDEX IF EXISTS`: a statement a crashed run already applied fails with "duplicate
    // column", "duplicate key name" or "can't drop", which migrateMysql takes as done.
    version: 3,
    name: 'claim-parking',
    statements: [
      `ALTER TABLE outbox ADD COLUMN parked TINYINT NOT NULL DEFAULT 0`,
      `ALTER TABLE outbox ADD INDEX outbox_claim_idx (dispatched_at, dead_lettered_at, parked, available_at, id)`,
      `ALTER TABLE outbox DROP INDEX outbox_pending_idx`,
    ],
  },
];

/**
 * MySQL error numbers of a migration statement that was already applied by a run that stopped
 * before recording its version: duplicate column (1060), duplicate key name (1061), can't drop a
 * column or key that is gone (1091).
 */
export const ALREADY_APPLIED_ERRNOS: ReadonlySet<number> = new Set([1060, 1061, 1091]);

/** Which migrations a database has: one row per version applied. */
export const MIGRATIONS_TABLE_SQL = `CREATE TABLE IF NOT EXISTS outbox_migrations (
  version    INT NOT NULL PRIMARY KEY,
  name       VARCHAR(255) NOT NULL,
  applied_at BIGINT NOT NULL
) ENGINE = InnoDB`;

/**
 * Serialises migrators (several processes starting at once): a named lock of the server,
 * per database, released by {@link RELEASE_MIGRATION_LOCK_SQL} or when the session ends.
 * ?1 timeout in seconds. Returns 1 when taken.
 */
export const TAKE_MIGRATION_LOCK_SQL = `SELECT GET_LOCK(CONCAT('agent_outbox_migrate:', DATABASE()), ?) AS taken`;
export const RELEASE_MIGRATION_LOCK_SQL = `DO RELEASE_LOCK(CONCAT('agent_outbox_migrate:', DATABASE()))`;
export const APPLIED_VERSIONS_SQL = `SELECT version FROM outbox_migrations`;
export const RECORD_MIGRATION_SQL = `INSERT INTO outbox_migrations (version, name, applied_at) VALUES (?, ?, ${NOW_MS})`;
