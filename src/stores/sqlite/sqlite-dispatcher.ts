import { OutboxValidationError } from '../../core/errors.js';
import { createDispatcher, type Dispatcher } from '../../dispatcher/dispatcher.js';
import {
  checkUnorderedTopics,
  refuseAsyncSettle,
  type StoreDispatcherOptions,
} from '../store-dispatcher-options.js';
import { addUnorderedTopicsSql } from '../../sql/sqlite/chains.js';
import { globToSqliteGlob } from '../../sql/sqlite/claim.js';
import { numbered, type SqliteDatabase } from './sqlite-database.js';
import { SqliteOutboxStore } from './sqlite-outbox-store.js';
import type { DispatchSynchronous } from './sqlite-write-queue.js';

/**
 * Options of {@link createSqliteDispatcher}: the polling dispatcher's options that SQLite
 * can honour (see {@link StoreDispatcherOptions}), and where its messages are.
 */
export interface SqliteDispatcherOptions extends StoreDispatcherOptions {
  /**
   * The SQLite file, opened with `openSqlite` (WAL, busy_timeout). A connection of the
   * dispatcher's own: better-sqlite3 is synchronous, so a claim waiting for the write lock holds
   * its process.
   */
  database: SqliteDatabase;
  /**
   * Whether the dispatcher's own commits (claims, settles, releases) wait for the disk.
   * `'normal'` (default): they do not (`PRAGMA synchronous = NORMAL` around each, the
   * connection's setting restored after). A process crash still loses none of them; an
   * operating-system crash or power cut may take the last ones back, which only sends their
   * messages again with the same message id: the crash stopped every dispatcher of the file too
   * (WAL mode keeps all of a file's connections on one machine), so no send was left under way.
   * `'full'`: a flush per commit, as the connection is set (openSqlite's default). Messages
   * written by producers are never affected.
   */
  synchronous?: DispatchSynchronous;
}

/**
 * Creates the polling dispatcher on a SQLite file: leases with fencing, per-aggregate order,
 * backoff with jitter, dead letters, `drain()` for `--once` — the Postgres dispatcher itself,
 * over {@link SqliteOutboxStore}. Several processes may each run one on the same file.
 * `unorderedTopics` are declared in `outbox_unordered_topics` first, so they apply to messages
 * written from then on, whichever dispatcher sends them (as on Postgres and D1).
 *
 * @example
 * ```ts
 * const dispatcher = createSqliteDispatcher({
 *   database: await openSqlite('file:./agent.db'),
 *   publisher: new HttpPublisher({ url: 'https://hooks.example.com/outbox' }),
 * });
 * dispatcher.start();
 * process.on('SIGTERM', () => void dispatcher.stop());
 * ```
 */
export function createSqliteDispatcher(options: SqliteDispatcherOptions): Dispatcher {
  const { database, synchronous = 'normal', ...rest } = options;
  if (typeof database?.prepare !== 'function')
    throw new OutboxValidationError('database', 'must be a better-sqlite3 Database (openSqlite)');
  if (synchronous !== 'normal' && synchronous !== 'full')
    throw new OutboxValidationError('synchronous', `must be 'normal' or 'full'`);
  refuseAsyncSettle(rest);
  const globs = options.unorderedTopics ?? [];
  checkUnorderedTopics(globs);
  if (globs.length > 0)
    database
      .prepare(addUnorderedTopicsSql)
      .all(numbered([JSON.stringify(globs.map(globToSqliteGlob)), Date.now()]));
  return createDispatcher({
    ...rest,
    store: new SqliteOutboxStore(database, Date.now, synchronous),
  });
}
