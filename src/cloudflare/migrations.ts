import type { D1Db } from './d1-types.js';

/**
 * The D1 (SQLite) schema: the same logical tables and columns as the Postgres migrations 001 and
 * 003, adapted to SQLite.
 *
 * - Times are INTEGER milliseconds since the epoch, not text: comparisons (`available_at <= ?`)
 *   are then numeric and index-friendly, and the dispatcher can pass its own clock.
 * - `payload` and `headers` are JSON text, checked with `json_valid` / `json_type`.
 * - `id` is AUTOINCREMENT so ids of pruned rows are never reused (a reused id could be mistaken
 *   for an old message by a log reader).
 * - `sequence` is assigned by the writer inside the caller's batch from `outbox_aggregates`
 *   (see enqueue-sql.ts). UNIQUE (aggregate_id, sequence) is a safety net: a writer bug that
 *   reused a sequence fails the whole batch instead of silently breaking order.
 * - Indexes on pending rows are partial (`WHERE dispatched_at IS NULL`), as in Postgres, so the
 *   dispatcher's cost follows the backlog, not the table's history.
 * - `consumer_positions.last_sequence` has CHECK (>= 0): the queue consumer's fenced position
 *   update writes -1 when the position moved under it, and the CHECK turns that into an error
 *   that rolls back its batch (see consumer-sql.ts).
 * - `consumer_dead_letters`: deliveries the queue consumer gave up on (poison bodies, permanent
 *   failures, too many attempts), kept in D1 where status queries can see them.
 *
 * Every statement is idempotent (IF NOT EXISTS), so applying twice, or from two Workers at once,
 * is harmless.
 */
export interface D1Migration {
  version: number;
  name: string;
  statements: readonly string[];
}

/** The D1 migrations, in order. */
export const D1_MIGRATIONS: readonly D1Migration[] = [
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
];

const MIGRATIONS_TABLE = `CREATE TABLE IF NOT EXISTS outbox_migrations (
  version    INTEGER PRIMARY KEY,
  name       TEXT    NOT NULL,
  applied_at INTEGER NOT NULL
)`;

/**
 * The whole schema as one SQL script, for `wrangler d1 migrations` users: write it to
 * `migrations/0001_agent_outbox.sql` (the example does; a test keeps the file in sync).
 */
export function d1MigrationScript(): string {
  const statements = [MIGRATIONS_TABLE];
  for (const migration of D1_MIGRATIONS) {
    statements.push(...migration.statements);
    statements.push(
      `INSERT OR IGNORE INTO outbox_migrations (version, name, applied_at)
VALUES (${migration.version}, '${migration.name}', CAST(unixepoch('subsec') * 1000 AS INTEGER))`,
    );
  }
  return `-- agent-outbox D1 schema (generated by d1MigrationScript(); do not edit)\n${statements.map((s) => `${s};`).join('\n\n')}\n`;
}

/**
 * Applies the pending D1 migrations. Each migration and its `outbox_migrations` row go in ONE
 * `batch` (a transaction), so a migration is applied entirely or not at all; concurrent callers
 * are harmless because every statement is idempotent. Returns the versions it applied.
 *
 * @example
 * ```ts
 * await migrateD1(env.DB);
 * ```
 */
export async function migrateD1(db: D1Db): Promise<number[]> {
  await db.prepare(MIGRATIONS_TABLE).run();
  const { results } = await db
    .prepare('SELECT version FROM outbox_migrations')
    .all<{ version: number }>();
  const applied = new Set(results.map((row) => Number(row.version)));
  const done: number[] = [];
  for (const migration of D1_MIGRATIONS) {
    if (applied.has(migration.version)) continue;
    await db.batch([
      ...migration.statements.map((sql) => db.prepare(sql)),
      db
        .prepare(
          'INSERT OR IGNORE INTO outbox_migrations (version, name, applied_at) VALUES (?, ?, ?)',
        )
        .bind(migration.version, migration.name, Date.now()),
    ]);
    done.push(migration.version);
  }
  return done;
}
