import { OutboxSchemaError } from '../../core/errors.js';
import {
  ALREADY_APPLIED_ERRNOS,
  APPLIED_VERSIONS_SQL,
  MIGRATIONS_TABLE_SQL,
  MYSQL_MIGRATIONS,
  RECORD_MIGRATION_SQL,
  RELEASE_MIGRATION_LOCK_SQL,
  TAKE_MIGRATION_LOCK_SQL,
} from '../../sql/mysql/schema.js';
import { selectRows, type MysqlPool } from './mysql-connection.js';

/** What {@link migrateMysql} did. */
export interface MysqlMigrateResult {
  /** Versions applied by this call, in order. */
  applied: number[];
  /** The schema version now. */
  version: number;
}

const LATEST = MYSQL_MIGRATIONS[MYSQL_MIGRATIONS.length - 1]!.version;

/**
 * Creates or upgrades the outbox tables (and the trigger that makes a plain INSERT a message) in
 * the pool's database. Runs under a named server lock (`GET_LOCK`, waiting up to 60 s), so
 * processes starting at once apply each migration once; safe to call on every start. DDL commits
 * implicitly in MySQL: a migration's statements are idempotent and its version is recorded after
 * them, so one interrupted half-way is simply run again (src/sql/mysql/schema.ts).
 *
 * @example
 * ```ts
 * const pool = await openMysql('mysql://root@127.0.0.1:3306/app');
 * await migrateMysql(pool);
 * ```
 */
export async function migrateMysql(
  pool: MysqlPool,
  onMigration?: (migration: { version: number; name: string }) => void,
): Promise<MysqlMigrateResult> {
  const connection = await pool.getConnection();
  try {
    const [lock] = await selectRows<{ taken: number | null }>(
      connection,
      TAKE_MIGRATION_LOCK_SQL,
      [60],
    );
    if (Number(lock?.taken) !== 1)
      throw new OutboxSchemaError(
        'agent-outbox: another process held the migration lock for 60 s; run `outbox migrate` again once it is done',
      );
    try {
      await connection.query(MIGRATIONS_TABLE_SQL);
      const done = new Set(
        (await selectRows<{ version: number }>(connection, APPLIED_VERSIONS_SQL)).map((r) =>
          Number(r.version),
        ),
      );
      const applied: number[] = [];
      for (const migration of MYSQL_MIGRATIONS) {
        if (done.has(migration.version)) continue;
        onMigration?.(migration);
        for (const statement of migration.statements) {
          try {
            await connection.query(statement);
          } catch (error) {
            // An ALTER a crashed run applied before recording the version (schema.ts).
            const errno = (error as { errno?: number }).errno;
            if (errno === undefined || !ALREADY_APPLIED_ERRNOS.has(errno)) throw error;
          }
        }
        await connection.query(RECORD_MIGRATION_SQL, [migration.version, migration.name]);
        applied.push(migration.version);
      }
      return { applied, version: LATEST };
    } finally {
      await connection.query(RELEASE_MIGRATION_LOCK_SQL);
    }
  } finally {
    connection.release();
  }
}

/** Throws when the database's outbox schema is behind this package (run `outbox migrate`). */
export async function assertMysqlSchemaCurrent(pool: MysqlPool): Promise<void> {
  let version = 0;
  try {
    const [row] = await selectRows<{ version: number | null }>(
      pool,
      'SELECT MAX(version) AS version FROM outbox_migrations',
    );
    version = Number(row?.version ?? 0);
  } catch (error) {
    // 1146: no outbox_migrations table, nothing was migrated. Anything else is a real failure.
    if ((error as { errno?: number }).errno !== 1146) throw error;
  }
  if (version < LATEST)
    throw new OutboxSchemaError(
      `agent-outbox: the MySQL outbox is at schema version ${version}, this package needs ${LATEST}: run \`outbox migrate --database-url mysql://…\` (or migrateMysql(pool)) first`,
    );
}
