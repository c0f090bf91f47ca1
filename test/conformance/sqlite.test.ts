import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  createSqliteDispatcher,
  createSqliteOutbox,
  listSqliteDeadLetters,
  migrateSqlite,
  openSqlite,
  replaySqliteDeadLetters,
  SqliteOutboxStore,
  type SqliteDriver,
} from '../../src/stores/sqlite/index.js';
import { requireLibsql, startLibsqlDispatch } from '../helpers/libsql.js';
import { describeStoreConformance } from './store-conformance.js';
import type { ConformanceTarget } from './store-under-test.js';

/**
 * SQLite: a fresh file in a temporary directory per test; nothing to start. Once per driver of
 * openSqlite: better-sqlite3, and libsql (skipped with a printed reason when it is not installed,
 * a failure under CI=true), whose kill -9 test runs the CLI's dispatch command through libsql.
 */
const sqlite = (driver: SqliteDriver): ConformanceTarget => ({
  name: driver === 'libsql' ? 'SQLite (libsql)' : 'SQLite',
  available: driver === 'libsql' ? requireLibsql : () => Promise.resolve(true),
  dispatchProcess: driver === 'libsql' ? startLibsqlDispatch : undefined,
  async open() {
    const dir = await mkdtemp(join(tmpdir(), 'agent-outbox-sqlite-'));
    const path = join(dir, 'agent.db');
    const db = await openSqlite(path, { driver });
    migrateSqlite(db);
    db.exec('CREATE TABLE orders (id TEXT PRIMARY KEY)');
    const outbox = createSqliteOutbox();
    const count = (sql: string) =>
      Promise.resolve(Number((db.prepare(sql).get() as { n: number }).n));
    return {
      url: `file:${path}`,
      writeOrder: async (orderId, messages, options = {}) =>
        db
          .transaction(() => {
            db.prepare('INSERT INTO orders (id) VALUES (?)').run(orderId);
            const written = outbox.enqueue(db, messages);
            if (options.failAfterEnqueue)
              throw new Error('the business step failed after the enqueue');
            return written;
          })
          .immediate(),
      enqueueOutsideTransaction: async (message) => outbox.enqueue(db, message),
      orders: () => count('SELECT count(*) AS n FROM orders'),
      messages: () => count('SELECT count(*) AS n FROM outbox'),
      leased: () =>
        count(
          'SELECT count(*) AS n FROM outbox WHERE lease_owner IS NOT NULL AND dispatched_at IS NULL',
        ),
      maxAttempts: () => count('SELECT coalesce(max(attempts), 0) AS n FROM outbox'),
      pending: () =>
        count(
          'SELECT count(*) AS n FROM outbox WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL',
        ),
      dispatcher: (options) => createSqliteDispatcher({ ...options, database: db }),
      store: () => new SqliteOutboxStore(db),
      deadLetters: () => Promise.resolve(listSqliteDeadLetters(db)),
      replayAllDead: () => Promise.resolve(replaySqliteDeadLetters(db, { allDead: true }).length),
      close: async () => {
        db.close();
        await rm(dir, { recursive: true, force: true });
      },
    };
  },
});

for (const target of [sqlite('better-sqlite3'), sqlite('libsql')])
  describeStoreConformance(target, await target.available());
