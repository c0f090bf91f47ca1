import { resolveEngine, type Engine } from '../core/engine.js';
import { OutboxSchemaError, OutboxValidationError } from '../core/errors.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import {
  appliedVersionsSql,
  createMigrationsTableSql,
  createSchemaSql,
  currentVersionSql,
  lockSql,
  migrationsTableExistsSql,
  recordVersionSql,
} from '../sql/migrations.js';
import { readEngineSql, setEngineSql } from '../sql/engine.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { LATEST_VERSION, MIGRATIONS } from './index.js';
import type { Migration } from './migration.js';

/** The migration that creates `outbox_engine`. */
const ENGINE_RECORD_VERSION = 36;

/** Options of {@link migrate}. */
export interface MigrateOptions {
  /** Schema holding the outbox tables; created if missing. Default `public`. */
  schema?: string;
  /**
   * Set when `executor` is already inside a transaction you will commit yourself. By default
   * `migrate` runs `BEGIN`/`COMMIT` on the executor, which must then be ONE connection (a `pg`
   * `Client`, not a `Pool`).
   */
  inTransaction?: boolean;
  /** Called before each migration is applied, e.g. to print progress. */
  onMigration?: (migration: { version: number; name: string }) => void;
  /**
   * The engine the schema's defaults follow (`outbox_engine`, migration 036), recorded when this
   * call creates the record. Default: `'lanes'` for a new schema (nothing migrated before this
   * call); a schema upgraded from before 036 records `'claims'`, the engine it used. A schema
   * that records another engine already is refused before anything is applied:
   * `setDatabaseEngine` (`outbox engine`) changes a record.
   */
  engine?: Engine;
  /** Migrations to apply; defaults to all of this release's. Exposed for tests. */
  migrations?: readonly Migration[];
}

/** What {@link migrate} did. */
export interface MigrateResult {
  schema: string;
  /** Migrations applied by this call (empty when the schema was already current). */
  applied: { version: number; name: string }[];
  /** Schema version after the call. */
  version: number;
}

/**
 * Creates or upgrades the outbox schema. Idempotent and safe to run from several processes at
 * once: it holds an advisory lock for the schema while it works, and records each version.
 *
 * @example
 * ```ts
 * const client = new pg.Client(process.env.DATABASE_URL);
 * await client.connect();
 * await migrate(fromPg(client), { schema: 'public' });
 * await client.end();
 * ```
 */
export async function migrate(
  executor: SqlExecutor,
  options: MigrateOptions = {},
): Promise<MigrateResult> {
  const schemaName = options.schema ?? DEFAULT_SCHEMA;
  const schema = quoteIdentifier(schemaName);
  const migrations = options.migrations ?? MIGRATIONS;
  const engine = options.engine === undefined ? undefined : resolveEngine(options.engine);
  const ownTransaction = !options.inTransaction;
  if (ownTransaction) await executor.query('BEGIN');
  try {
    await executor.query(lockSql, [schemaName]);
    await executor.query(createSchemaSql(schema));
    await executor.query(createMigrationsTableSql(schema));
    const { rows } = await executor.query<{ version: number }>(appliedVersionsSql(schema));
    const done = new Set(rows.map((row) => Number(row.version)));
    if (engine !== undefined && done.has(ENGINE_RECORD_VERSION)) {
      const recorded = await executor.query<{ engine: string }>(readEngineSql(schema));
      const current = recorded.rows[0]?.engine;
      if (current !== engine)
        throw new OutboxValidationError(
          'engine',
          `schema "${schemaName}" records the ${String(current)} engine already: \`outbox engine ${engine} --schema ${schemaName}\` (setDatabaseEngine) changes it`,
        );
    }
    const applied: { version: number; name: string }[] = [];
    for (const migration of migrations) {
      if (done.has(migration.version)) continue;
      options.onMigration?.({ version: migration.version, name: migration.name });
      for (const statement of migration.up(schema)) await executor.query(statement);
      await executor.query(recordVersionSql(schema), [migration.version, migration.name]);
      applied.push({ version: migration.version, name: migration.name });
    }
    // A new schema takes the lanes engine; one upgraded past 036 keeps the claim engine it used
    // (036 records it), unless this call names one.
    const recorded = engine ?? (done.size === 0 ? 'lanes' : undefined);
    if (recorded !== undefined && applied.some((m) => m.version === ENGINE_RECORD_VERSION))
      await executor.query(setEngineSql(schema), [recorded]);
    if (ownTransaction) await executor.query('COMMIT');
    const version = Math.max(0, ...done, ...applied.map((m) => m.version));
    return { schema: schemaName, applied, version };
  } catch (error) {
    if (ownTransaction) await executor.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}

/**
 * Reads the schema version without taking any lock. Returns 0 when the schema was never migrated.
 */
export async function schemaVersion(
  executor: SqlExecutor,
  schemaName = DEFAULT_SCHEMA,
): Promise<number> {
  const schema = quoteIdentifier(schemaName);
  const { rows } = await executor.query<{ exists: boolean }>(migrationsTableExistsSql, [
    `${schema}.outbox_migrations`,
  ]);
  if (!rows[0]?.exists) return 0;
  const current = await executor.query<{ version: number }>(currentVersionSql(schema));
  return Number(current.rows[0]?.version ?? 0);
}

/** Throws a {@link OutboxSchemaError} that says which command to run when the schema is behind. */
export async function assertSchemaCurrent(
  executor: SqlExecutor,
  schemaName = DEFAULT_SCHEMA,
): Promise<void> {
  const version = await schemaVersion(executor, schemaName);
  if (version < LATEST_VERSION) {
    throw new OutboxSchemaError(
      `schema "${schemaName}" is at version ${version}, this agent-outbox needs ${LATEST_VERSION}: run \`outbox migrate --schema ${schemaName}\` (or migrate() from the API)`,
    );
  }
}
