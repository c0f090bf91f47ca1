import { OutboxSchemaError } from '../../core/errors.js';
import { MIGRATIONS_TABLE_SQL, SQLITE_MIGRATIONS } from '../../sql/sqlite/schema.js';
import { immediate, type SqliteDatabase } from './sqlite-database.js';

/** What {@link migrateSqlite} did. */
export interface SqliteMigrateResult {
  /** Versions applied by this call, in order. */
  applied: number[];
  /** The schema version now. */
  version: number;
}

/**
 * Creates or upgrades the outbox tables in a SQLite file: the schema D1 uses
 * (src/sql/sqlite/schema.ts), so the same statements run on both. Each migration and its
 * `outbox_migrations` row commit together in one `BEGIN IMMEDIATE` transaction, which also
 * serialises concurrent callers (several processes starting at once): the second one finds the
 * version recorded and skips it. Safe to call on every start.
 *
 * @example
 * ```ts
 * const db = await openSqlite('file:./agent.db');
 * migrateSqlite(db);
 * ```
 */
export function migrateSqlite(
  db: SqliteDatabase,
  onMigration?: (migration: { version: number; name: string }) => void,
): SqliteMigrateResult {
  db.exec(MIGRATIONS_TABLE_SQL);
  const applied: number[] = [];
  for (const migration of SQLITE_MIGRATIONS) {
    const done = immediate(db, () => {
      const found = db
        .prepare('SELECT 1 FROM outbox_migrations WHERE version = ?')
        .get(migration.version);
      if (found) return false;
      onMigration?.(migration);
      for (const statement of migration.statements) db.exec(statement);
      db.prepare('INSERT INTO outbox_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(
        migration.version,
        migration.name,
        Date.now(),
      );
      return true;
    });
    if (done) applied.push(migration.version);
  }
  return { applied, version: SQLITE_MIGRATIONS[SQLITE_MIGRATIONS.length - 1]!.version };
}

/** Throws when the file's outbox schema is behind this package (run `outbox migrate`). */
export function assertSqliteSchemaCurrent(db: SqliteDatabase): void {
  const latest = SQLITE_MIGRATIONS[SQLITE_MIGRATIONS.length - 1]!.version;
  let version = 0;
  try {
    const row = db.prepare('SELECT max(version) AS version FROM outbox_migrations').get() as
      { version: number | null } | undefined;
    version = Number(row?.version ?? 0);
  } catch {
    // No outbox_migrations table: nothing was migrated.
  }
  if (version < latest)
    throw new OutboxSchemaError(
      `agent-outbox: the SQLite outbox in ${db.name} is at schema version ${version}, this package needs ${latest}: run \`outbox migrate --database-url file:${db.name}\` (or migrateSqlite(db)) first`,
    );
}
