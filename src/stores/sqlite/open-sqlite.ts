import { existsSync } from 'node:fs';
import type Libsql from 'libsql';
import { OutboxValidationError } from '../../core/errors.js';
import { importPeer } from '../../publishers/optional-peer.js';
import type { SqliteDatabase, SqliteStatement } from './sqlite-database.js';
import { isSqliteUrl, sqliteFilePath } from './sqlite-url.js';

/** The client libraries {@link openSqlite} can open a file with. */
export type SqliteDriver = 'better-sqlite3' | 'libsql';

const DRIVERS: readonly SqliteDriver[] = ['better-sqlite3', 'libsql'];

/** Options of {@link openSqlite}. */
export interface OpenSqliteOptions {
  /**
   * The client library, an optional peer dependency either way. `better-sqlite3` (default):
   * `npm install better-sqlite3`. `libsql`: `npm install libsql`, libSQL's better-sqlite3
   * compatible client, on a local file (remote Turso databases and embedded replicas are not
   * tested). Same file format, same SQL, same pragmas: a file written through one opens with the
   * other.
   */
  driver?: SqliteDriver;
  /**
   * How long a statement waits for another connection's write lock before failing with
   * SQLITE_BUSY, in ms. SQLite runs one writer at a time per file: dispatchers and the
   * application's own transactions queue for it. Default 10 000.
   */
  busyTimeoutMs?: number;
  /**
   * `full` (default): every commit is on disk before it returns, so a power cut loses nothing
   * committed. `normal`: in WAL mode a process crash (kill -9) still loses nothing, but a power
   * cut may lose the last commits — messages whose business rows were lost with them.
   */
  synchronous?: 'full' | 'normal';
  /**
   * Refuse a file that does not exist instead of creating an empty one (what the CLI does for
   * every command but `migrate`: a mistyped path must not leave a stray database behind).
   * Default false.
   */
  mustExist?: boolean;
}

/**
 * Opens (creating if missing) a SQLite file with better-sqlite3 (an optional peer dependency:
 * `npm install better-sqlite3`), or with libsql given `driver: 'libsql'`, set up for the outbox:
 * WAL journal (readers never block the writer and a crash anywhere loses nothing committed),
 * `busy_timeout`, `synchronous`. Accepts a path or a `file:` / `sqlite:` URL. Open your
 * application's own connection the same way, or set the same pragmas on it.
 *
 * @example
 * ```ts
 * const db = await openSqlite('file:./agent.db');
 * migrateSqlite(db);
 * // The same file through libSQL's client (`npm install libsql`):
 * const viaLibsql = await openSqlite('file:./agent.db', { driver: 'libsql' });
 * ```
 */
export async function openSqlite(
  pathOrUrl: string,
  options: OpenSqliteOptions = {},
): Promise<SqliteDatabase> {
  const driver = options.driver ?? 'better-sqlite3';
  if (!DRIVERS.includes(driver))
    throw new OutboxValidationError(
      'driver',
      `${JSON.stringify(driver)} is not a SQLite driver: use ${DRIVERS.map((d) => `'${d}'`).join(' or ')}`,
    );
  const path = isSqliteUrl(pathOrUrl) ? sqliteFilePath(pathOrUrl) : pathOrUrl;
  const timeout = options.busyTimeoutMs ?? 10_000;
  let db: SqliteDatabase;
  if (driver === 'libsql') {
    const { default: Database } = await importPeer(
      'libsql',
      'agent-outbox/sqlite',
      () => import('libsql'),
    );
    mustExist(path, options);
    db = libsqlAsSqliteDatabase(new Database(path, { timeout }), path);
  } else {
    const { default: Database } = await importPeer(
      'better-sqlite3',
      'agent-outbox/sqlite',
      () => import('better-sqlite3'),
    );
    mustExist(path, options);
    db = new Database(path, { timeout }) as unknown as SqliteDatabase;
  }
  configureSqlite(db, options);
  return db;
}

function mustExist(path: string, options: OpenSqliteOptions): void {
  if (options.mustExist && path !== ':memory:' && path !== '' && !existsSync(path))
    throw new Error(
      `agent-outbox: there is no SQLite file at ${path}: check the path, or create the outbox there with \`outbox migrate --database-url file:${path}\` (or migrateSqlite(db))`,
    );
}

/**
 * The libsql 0.5 `Database`, put right where it answers differently from better-sqlite3 and the
 * outbox would notice; everything else (`transaction`, `exec`, `sync`, …) is libsql's own:
 * - `name` is always `''` there: the path here, for the WAL check and error messages;
 * - `inTransaction` on a closed connection aborts the process (a Rust panic): false here, as in
 *   better-sqlite3 (a dispatcher that stops after its file was closed asks it). The property
 *   cannot be redefined on the instance, hence the proxy;
 * - a `pluck(true)` statement's `get()` returns the whole row (pluck applies to `all()` only),
 *   and so did `pragma(…, { simple: true })`: pluck is raw mode plus the first value here;
 * - `get()` rows carry a `_metadata` property: removed, so a row is its columns.
 * Not put right (docs/sqlite.md): binding a boolean aborts the process where better-sqlite3
 * throws a TypeError (the outbox binds none); and a statement that failed with SQLITE_BUSY keeps
 * its read snapshot, even past ROLLBACK, until it runs again, so write in `.immediate()`
 * transactions (which never meet SQLITE_BUSY after BEGIN).
 */
function libsqlAsSqliteDatabase(db: Libsql.Database, path: string): SqliteDatabase {
  const prepareLibsql = db.prepare.bind(db);
  const prepare = (sql: string) => asBetterSqliteStatement(prepareLibsql(sql) as SqliteStatement);
  // Own properties, as in better-sqlite3 they are plain methods one may wrap (tests count calls).
  Object.assign(db, {
    name: path,
    prepare,
    pragma(source: string, options: { simple?: boolean } = {}) {
      const statement = prepare(`PRAGMA ${source}`);
      return options.simple ? statement.pluck!(true) && statement.get() : statement.all();
    },
  });
  return new Proxy(db, {
    get: (target, key, receiver) =>
      key === 'inTransaction'
        ? target.open && target.inTransaction
        : (Reflect.get(target, key, receiver) as unknown),
  }) as unknown as SqliteDatabase;
}

/** better-sqlite3's `get`, and its pluck and raw modes (exclusive of each other), on libsql's. */
function asBetterSqliteStatement(statement: SqliteStatement): SqliteStatement {
  const { raw, get, all } = statement;
  let plucking = false;
  return Object.assign(statement, {
    raw(toggle = true) {
      plucking = false;
      raw!.call(statement, toggle);
      return statement;
    },
    pluck(toggle = true) {
      plucking = toggle;
      raw!.call(statement, toggle);
      return statement;
    },
    get(...params: unknown[]) {
      const row = get.apply(statement, params) as Record<string, unknown> | unknown[] | undefined;
      if (row === undefined) return row;
      if (plucking) return (row as unknown[])[0];
      if (!Array.isArray(row)) delete row._metadata;
      return row;
    },
    all(...params: unknown[]) {
      const rows = all.apply(statement, params);
      return plucking ? rows.map((row) => (row as unknown[])[0]) : rows;
    },
  });
}

/** Sets the outbox's pragmas on a connection opened elsewhere (see {@link openSqlite}). */
export function configureSqlite(db: SqliteDatabase, options: OpenSqliteOptions = {}): void {
  db.pragma(`busy_timeout = ${Math.max(0, Math.round(options.busyTimeoutMs ?? 10_000))}`);
  const mode = db.pragma('journal_mode = WAL', { simple: true });
  if (String(mode).toLowerCase() !== 'wal' && db.name !== ':memory:' && db.name !== '')
    throw new Error(
      `agent-outbox: SQLite refused WAL mode on ${db.name} (journal_mode is ${String(mode)}); the outbox needs WAL (a file on a local disk, not a network share)`,
    );
  db.pragma(`synchronous = ${options.synchronous === 'normal' ? 'NORMAL' : 'FULL'}`);
}
