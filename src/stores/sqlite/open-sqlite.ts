import { existsSync } from 'node:fs';
import { importPeer } from '../../publishers/optional-peer.js';
import type { SqliteDatabase } from './sqlite-database.js';
import { isSqliteUrl, sqliteFilePath } from './sqlite-url.js';

/** Options of {@link openSqlite}. */
export interface OpenSqliteOptions {
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
 * `npm install better-sqlite3`), set up for the outbox: WAL journal (readers never block the
 * writer and a crash anywhere loses nothing committed), `busy_timeout`, `synchronous`. Accepts a
 * path or a `file:` / `sqlite:` URL. Open your application's own connection the same way, or set
 * the same pragmas on it.
 *
 * @example
 * ```ts
 * const db = await openSqlite('file:./agent.db');
 * migrateSqlite(db);
 * ```
 */
export async function openSqlite(
  pathOrUrl: string,
  options: OpenSqliteOptions = {},
): Promise<SqliteDatabase> {
  const { default: Database } = await importPeer(
    'better-sqlite3',
    'agent-outbox/sqlite',
    () => import('better-sqlite3'),
  );
  const path = isSqliteUrl(pathOrUrl) ? sqliteFilePath(pathOrUrl) : pathOrUrl;
  if (options.mustExist && path !== ':memory:' && path !== '' && !existsSync(path))
    throw new Error(
      `agent-outbox: there is no SQLite file at ${path}: check the path, or create the outbox there with \`outbox migrate --database-url file:${path}\` (or migrateSqlite(db))`,
    );
  const db = new Database(path, { timeout: options.busyTimeoutMs ?? 10_000 });
  configureSqlite(db, options);
  return db as unknown as SqliteDatabase;
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
