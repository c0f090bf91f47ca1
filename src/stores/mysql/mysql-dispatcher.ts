import { OutboxValidationError } from '../../core/errors.js';
import { createDispatcher, type Dispatcher } from '../../dispatcher/dispatcher.js';
import {
  checkUnorderedTopics,
  refuseAsyncSettle,
  type StoreDispatcherOptions,
} from '../store-dispatcher-options.js';
import { globToLike } from '../../dispatcher/topic-patterns.js';
import type { MysqlPool } from './mysql-connection.js';
import { MysqlOutboxStore } from './mysql-outbox-store.js';

/**
 * Options of {@link createMysqlDispatcher}: the polling dispatcher's options that MySQL
 * can honour (see {@link StoreDispatcherOptions}), and where its messages are.
 */
export interface MysqlDispatcherOptions extends StoreDispatcherOptions {
  /** A mysql2 pool on the outbox's database (see `openMysql`). */
  pool: MysqlPool;
}

/**
 * Creates the polling dispatcher on MySQL 8 / MariaDB 10.6+: leases with fencing, per-aggregate
 * order, backoff with jitter, dead letters, `drain()` for `--once` — the Postgres dispatcher
 * itself, over {@link MysqlOutboxStore}. Several processes may each run one on the same database.
 * `unorderedTopics` are recorded in `outbox_unordered_topics` first, so they apply to messages
 * written from then on, whichever dispatcher sends them (as on Postgres and SQLite).
 *
 * @example
 * ```ts
 * const dispatcher = createMysqlDispatcher({
 *   pool: await openMysql('mysql://root@127.0.0.1:3306/app'),
 *   publisher: new HttpPublisher({ url: 'https://hooks.example.com/outbox' }),
 * });
 * dispatcher.start();
 * process.on('SIGTERM', () => void dispatcher.stop());
 * ```
 */
export function createMysqlDispatcher(options: MysqlDispatcherOptions): Dispatcher {
  const { pool, ...rest } = options;
  if (typeof pool?.getConnection !== 'function')
    throw new OutboxValidationError('pool', 'must be a mysql2 promise pool (openMysql)');
  const globs = options.unorderedTopics ?? [];
  checkUnorderedTopics(globs);
  refuseAsyncSettle(rest);
  return createDispatcher({
    ...rest,
    store: new MysqlOutboxStore(pool, { unorderedTopicPatterns: globs.map(globToLike) }),
  });
}
