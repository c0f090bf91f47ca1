/**
 * The SQLite schema, shared by D1 (src/cloudflare) and the SQLite store (src/stores/sqlite): the same
 * logical tables and columns as the Postgres migrations 001, 003
 * and 009, adapted to SQLite.
 *
 * - Times are INTEGER milliseconds since the epoch, not text: comparisons (`available_at <= ?`)
 *   are then numeric and index-friendly, and the dispatcher can pass its own clock.
 * - `payload` and `headers` are JSON text, checked with `json_valid` / `json_type`.
 * - `id` is AUTOINCREMENT so ids of pruned rows are never reused (a reused id could be mistaken
 *   for an old message by a log reader).
 * - `sequence` is assigned by the writer inside the caller's batch from `outbox_aggregates`
 *   (see enqueue.ts). UNIQUE (aggregate_id, sequence) is a safety net: a writer bug that
 *   reused a sequence fails the whole batch instead of silently breaking order.
 * - Indexes on pending rows are partial (`WHERE dispatched_at IS NULL`), as in Postgres, so the
 *   dispatcher's cost follows the backlog, not the table's history; since version 2 a claim's
 *   cost follows its batch, not the backlog (see version 2 below).
 * - `consumer_positions.last_sequence` has CHECK (>= 0): the queue consumer's fenced position
 *   update writes -1 when the position moved under it, and the CHECK turns that into an error
 *   that rolls back its batch (see consumer.ts).
 * - `consumer_dead_letters`: deliveries the queue consumer gave up on (poison bodies, permanent
 *   failures, too many attempts), kept in D1 where status queries can see them.
 *
 * Migrations are append-only: a released one never changes, later ones alter what it made.
 * Statements are idempotent (IF NOT EXISTS) where SQLite allows it; `ALTER TABLE ADD COLUMN` is
 * not, and the migrators (`migrateD1`, `migrateSqlite`) treat a migration that a concurrent caller applied first as done.
 */
export interface SqliteMigration {
  version: number;
  name: string;
  statements: readonly string[];
}

/** The SQLite migrations, in order: D1 and the SQLite store apply the same list. */
export const SQLITE_MIGRATIONS: readonly SqliteMigration[] = [
  {
    version: 1,
    name: 'initial',
    statements: [
      `CREATE TABLE IF NOT EXISTS outbox_aggregates (
  aggregate_id  TEXT    PRIMARY KEY,
  last_sequence INTEGER NOT NULL
)`,
      `CREATE TABLE IF NOT EXISTS outbox (
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  message_id       TEXT    NOT NULL UNIQUE,
  aggregate_id     TEXT    NOT NULL CHECK (length(aggregate_id) BETWEEN 1 AND 255),
  topic            TEXT    NOT NULL CHECK (length(topic) BETWEEN 1 AND 255),
  payload          TEXT    NOT NULL CHECK (json_valid(payload)),
  headers          TEXT    NOT NULL DEFAULT '{}' CHECK (json_type(headers) = 'object'),
  sequence         INTEGER NOT NULL,
  created_at       INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
  available_at     INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
  dispatched_at    INTEGER,
  attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  last_error       TEXT,
  lease_owner      TEXT,
  lease_expires_at INTEGER,
  dead_lettered_at INTEGER,
  UNIQUE (aggregate_id, sequence)
)`,
      `CREATE INDEX IF NOT EXISTS outbox_pending_idx ON outbox (available_at, id)
  WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL`,
      `CREATE INDEX IF NOT EXISTS outbox_aggregate_pending_idx ON outbox (aggregate_id, sequence)
  WHERE dispatched_at IS NULL`,
      `CREATE INDEX IF NOT EXISTS outbox_dead_letter_idx ON outbox (dead_lettered_at)
  WHERE dead_lettered_at IS NOT NULL AND dispatched_at IS NULL`,
      `CREATE TABLE IF NOT EXISTS processed_messages (
  consumer     TEXT    NOT NULL,
  message_id   TEXT    NOT NULL,
  state        TEXT    NOT NULL DEFAULT 'done' CHECK (state IN ('claimed', 'done')),
  processed_at INTEGER NOT NULL,
  PRIMARY KEY (consumer, message_id)
)`,
      `CREATE INDEX IF NOT EXISTS processed_messages_processed_at_idx
  ON processed_messages (processed_at)`,
      `CREATE TABLE IF NOT EXISTS consumer_positions (
  consumer      TEXT    NOT NULL,
  aggregate_id  TEXT    NOT NULL,
  last_sequence INTEGER NOT NULL CHECK (last_sequence >= 0),
  updated_at    INTEGER NOT NULL,
  PRIMARY KEY (consumer, aggregate_id)
)`,
      `CREATE TABLE IF NOT EXISTS consumer_dead_letters (
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  consumer         TEXT    NOT NULL,
  queue_message_id TEXT    NOT NULL,
  message_id       TEXT,
  reason           TEXT    NOT NULL,
  error            TEXT,
  body             TEXT,
  dead_lettered_at INTEGER NOT NULL
)`,
    ],
  },
  {
    // Issue 16 on D1, the same design as Postgres migration 009 (see its comment): a claim reads
    // ready messages only, never the rows queued behind an aggregate's head.
    //
    // - `ordered` (0/1) is decided ONCE, when the message is written: by the message
    //   (`ordered: false`), else by `outbox_unordered_topics` (SQLite GLOB patterns). Before, each
    //   dispatcher's `unorderedTopics` decided at claim time, so two dispatchers (a Cron and a
    //   Durable Object, or two deploys) with different lists could send one aggregate out of order.
    // - `ready` (0/1) marks where a claim may start: unordered messages and each aggregate's first
    //   pending ordered message (its head). The writer decides it in its INSERT and the settle
    //   marks the next head in its batch; SQLite runs one write transaction at a time, so both are
    //   exact (no race like the one Postgres's settle has to close). DEFAULT 1, not 0: a row
    //   written by an older writer (a deploy after this migration) is then claimable, and the
    //   claim's head check keeps it in order until it IS the head.
    // - `outbox_ready_idx` holds only ready rows that are pending and not dead: rows behind a head,
    //   heads backing off (`available_at` past the scanned range) and dead heads under `hold` are
    //   not read by a claim at all. `outbox_chain_idx` is each aggregate's chain of pending ordered
    //   messages by sequence: the writer's "anything pending?" probe, the claim's head check and
    //   run, and the settle's "who is next?" each read its first entries.
    // - `outbox_pending_idx` (every pending row by due time) was only the old claim's index.
    // - `outbox_maintenance`: when the periodic head repair last ran (chains.ts).
    //
    // Existing pending rows become ordered (the old default) and only their heads stay ready: one
    // pass over the backlog, not the history. ALTER TABLE ADD COLUMN is not idempotent; migrateD1
    // treats a concurrent caller that applied it first as success.
    version: 2,
    name: 'ordered-chains',
    statements: [
      `ALTER TABLE outbox ADD COLUMN ordered INTEGER NOT NULL DEFAULT 1 CHECK (ordered IN (0, 1))`,
      `ALTER TABLE outbox ADD COLUMN ready INTEGER NOT NULL DEFAULT 1 CHECK (ready IN (0, 1))`,
      `UPDATE outbox SET ready = 0
 WHERE dispatched_at IS NULL
   AND EXISTS (
     SELECT 1 FROM outbox p
      WHERE p.aggregate_id = outbox.aggregate_id
        AND p.sequence < outbox.sequence
        AND p.dispatched_at IS NULL
   )`,
      `CREATE INDEX IF NOT EXISTS outbox_ready_idx ON outbox (available_at, id)
  WHERE ready = 1 AND dispatched_at IS NULL AND dead_lettered_at IS NULL`,
      `CREATE INDEX IF NOT EXISTS outbox_chain_idx ON outbox (aggregate_id, sequence)
  WHERE dispatched_at IS NULL AND ordered = 1`,
      `DROP INDEX IF EXISTS outbox_pending_idx`,
      `CREATE TABLE IF NOT EXISTS outbox_unordered_topics (
  pattern    TEXT    PRIMARY KEY CHECK (length(pattern) BETWEEN 1 AND 255),
  created_at INTEGER NOT NULL
)`,
      `CREATE TABLE IF NOT EXISTS outbox_maintenance (
  task        TEXT    PRIMARY KEY,
  last_run_at INTEGER NOT NULL
)`,
    ],
  },
  {
    // A plain SQL `INSERT INTO outbox (aggregate_id, topic, payload[, headers])` from any
    // language or tool is a message, as on Postgres (whose BEFORE INSERT trigger fills the
    // sequence and defaults). SQLite's triggers cannot change the row being inserted, and the
    // plain INSERT has no message id or sequence, which are NOT NULL. So this BEFORE trigger
    // inserts the whole message itself — what the writer's two statements do (enqueue.ts):
    // the aggregate's counter bumped in the caller's transaction (SQLite runs one write
    // transaction at a time, so sequence order is commit order), `ordered` from
    // `outbox_unordered_topics` unless the INSERT says 0, `ready` from the chain — and then
    // `RAISE(IGNORE)` drops the original row. The writer's own INSERT gives a message id and a
    // sequence, so the trigger leaves it alone.
    //
    // What it costs the caller: the INSERT reports 0 rows changed, and `RETURNING` gives nothing
    // (the row was written by the trigger, not by the statement). Bad input is refused with
    // `RAISE(ABORT)` and a message that names the column, and the statement writes nothing (its
    // transaction stays open, for the caller to roll back). The message id is a UUIDv7, like the
    // writers' ones. A sequence in the INSERT is ignored, as on Postgres: a caller-chosen one
    // could collide.
    //
    // Tried: rebuilding the table with defaults for `message_id` and `sequence` and an AFTER
    // trigger that fixes the row up (the INSERT would report its row): SQLite cannot change a
    // column's default in place, and copying every row of a large outbox (D1 bills per row)
    // into a new table for this was out of proportion.
    version: 3,
    name: 'plain-inserts',
    statements: [
      `CREATE TRIGGER IF NOT EXISTS outbox_plain_insert
BEFORE INSERT ON outbox
FOR EACH ROW WHEN NEW.message_id IS NULL OR NEW.sequence IS NULL
BEGIN
  SELECT RAISE(ABORT, 'agent-outbox: INSERT INTO outbox needs aggregate_id, a text of 1 to 255 characters')
   WHERE NEW.aggregate_id IS NULL OR typeof(NEW.aggregate_id) <> 'text'
      OR length(NEW.aggregate_id) NOT BETWEEN 1 AND 255;
  SELECT RAISE(ABORT, 'agent-outbox: INSERT INTO outbox needs topic, a text of 1 to 255 characters')
   WHERE NEW.topic IS NULL OR typeof(NEW.topic) <> 'text'
      OR length(NEW.topic) NOT BETWEEN 1 AND 255;
  SELECT RAISE(ABORT, 'agent-outbox: INSERT INTO outbox needs payload, a JSON text')
   WHERE NEW.payload IS NULL OR typeof(NEW.payload) <> 'text' OR NOT json_valid(NEW.payload);
  SELECT RAISE(ABORT, 'agent-outbox: outbox headers must be a JSON object of string values (or left out)')
   WHERE NEW.headers IS NOT NULL
     AND (typeof(NEW.headers) <> 'text' OR NOT json_valid(NEW.headers)
          OR CASE WHEN json_valid(NEW.headers) THEN json_type(NEW.headers) END IS NOT 'object'
          OR CASE WHEN json_valid(NEW.headers)
                  THEN EXISTS (SELECT 1 FROM json_each(NEW.headers) WHERE type <> 'text') END);
  INSERT INTO outbox_aggregates (aggregate_id, last_sequence)
  VALUES (NEW.aggregate_id, 1)
  ON CONFLICT (aggregate_id) DO UPDATE SET last_sequence = last_sequence + 1;
  INSERT INTO outbox (message_id, aggregate_id, topic, payload, headers, sequence, created_at,
                      available_at, ordered, ready)
  SELECT coalesce(NEW.message_id, u.id), NEW.aggregate_id, NEW.topic, NEW.payload,
         coalesce(NEW.headers, '{}'),
         a.last_sequence, NEW.created_at, NEW.available_at, d.ordered,
         CASE
           WHEN d.ordered = 0 OR a.last_sequence = 1 THEN 1
           WHEN EXISTS (
             SELECT 1 FROM outbox p
              WHERE p.aggregate_id = NEW.aggregate_id AND p.dispatched_at IS NULL AND p.ordered = 1
           ) THEN 0
           ELSE 1
         END
    FROM outbox_aggregates a,
         (SELECT CASE WHEN NEW.ordered = 0 THEN 0
                      ELSE NOT EXISTS (SELECT 1 FROM outbox_unordered_topics t
                                        WHERE NEW.topic GLOB t.pattern) END AS ordered) d,
         (SELECT lower(substr(x.t, 1, 8) || '-' || substr(x.t, 9, 4) || '-7'
                       || substr(x.r, 1, 3) || '-'
                       || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(x.r, 4, 3) || '-'
                       || substr(x.r, 7, 12)) AS id
            FROM (SELECT printf('%012x', CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS t,
                         hex(randomblob(9)) AS r) x) u
   WHERE a.aggregate_id = NEW.aggregate_id;
  SELECT RAISE(IGNORE);
END`,
    ],
  },
  {
    // The consumer ledger on a SQLite file (createSqliteLedger) has a claim-first mode, whose
    // claims need a lease as on Postgres: a claim whose holder crashed is taken over once its
    // lease ends, and the lease end (ms) is the claim's fencing token (consumer-ledger.ts). NULL
    // on done rows and on every row written before; D1's queue consumer does not use it.
    version: 4,
    name: 'consumer-claims',
    statements: [`ALTER TABLE processed_messages ADD COLUMN lease_expires_at INTEGER`],
  },
  {
    // One aggregate-keyed index entry per pending message instead of two. Every pending ordered
    // message was in both `outbox_aggregate_pending_idx` (all pending rows, for status) and
    // `outbox_chain_idx` (pending ordered rows, for the claims and the writer), so its insert
    // and its settle each changed two entries of indexes whose pages a batch of 200 aggregates
    // touches all over: most of an ordered batch's commit (WAL pages, on D1 rows written). Now
    // the chain index holds the pending ordered rows and `outbox_unordered_pending_idx` the pending
    // unordered ones, and status reads both (admin.ts). `ordered` is NOT NULL and 0 or 1, so
    // the two cover every pending row exactly once. Measured on the SQLite store
    // (bench/cases/sqlite.ts's ordered drain, 20,000 messages on 500 aggregates, six drains
    // each, alternated): 213–238 ms with the old index, 192–209 without it.
    version: 5,
    name: 'one-pending-index-per-row',
    statements: [
      `CREATE INDEX IF NOT EXISTS outbox_unordered_pending_idx ON outbox (id)
  WHERE dispatched_at IS NULL AND ordered = 0`,
      `DROP INDEX IF EXISTS outbox_aggregate_pending_idx`,
    ],
  },
];

/** Which migrations a database has: one row per version applied. */
export const MIGRATIONS_TABLE_SQL = `CREATE TABLE IF NOT EXISTS outbox_migrations (
  version    INTEGER PRIMARY KEY,
  name       TEXT    NOT NULL,
  applied_at INTEGER NOT NULL
)`;
