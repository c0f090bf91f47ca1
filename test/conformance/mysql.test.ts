import {
  createMysqlDispatcher,
  createMysqlOutbox,
  listMysqlDeadLetters,
  MysqlOutboxStore,
  replayMysqlDeadLetters,
} from '../../src/stores/mysql/index.js';
import { createMysqlTestDatabase, requireMysql } from '../helpers/mysql-database.js';
import { describeStoreConformance } from './store-conformance.js';
import type { ConformanceTarget } from './store-under-test.js';

/**
 * MariaDB (this machine's 10.11; MySQL 8 speaks the same protocol): a database of its own per
 * test, CREATE DATABASE with a random suffix, dropped after. Skipped with a printed reason when
 * the server is not running, a failure under CI=true.
 */
const mariadb: ConformanceTarget = {
  name: 'MariaDB',
  available: requireMysql,
  async open() {
    const db = await createMysqlTestDatabase();
    await db.pool.query('CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY)');
    const outbox = createMysqlOutbox();
    const count = async (sql: string) => {
      const [rows] = await db.pool.query(sql);
      return Number((rows as { n: number | string }[])[0]!.n);
    };
    return {
      url: db.url,
      async writeOrder(orderId, messages, options = {}) {
        const connection = await db.connect();
        try {
          await connection.beginTransaction();
          await connection.query('INSERT INTO orders (id) VALUES (?)', [orderId]);
          const written = await outbox.enqueue(connection, messages);
          if (options.failAfterEnqueue)
            throw new Error('the business step failed after the enqueue');
          await connection.commit();
          return written;
        } catch (error) {
          await connection.rollback();
          throw error;
        } finally {
          await connection.end();
        }
      },
      async enqueueOutsideTransaction(message) {
        const connection = await db.connect();
        try {
          return await outbox.enqueue(connection, message);
        } finally {
          await connection.end();
        }
      },
      orders: () => count('SELECT COUNT(*) AS n FROM orders'),
      messages: () => count('SELECT COUNT(*) AS n FROM outbox'),
      leased: () =>
        count(
          'SELECT COUNT(*) AS n FROM outbox WHERE lease_owner IS NOT NULL AND dispatched_at IS NULL',
        ),
      maxAttempts: () => count('SELECT coalesce(MAX(attempts), 0) AS n FROM outbox'),
      pending: () =>
        count(
          'SELECT COUNT(*) AS n FROM outbox WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL',
        ),
      dispatcher: (options) => createMysqlDispatcher({ ...options, pool: db.pool }),
      store: () => new MysqlOutboxStore(db.pool),
      deadLetters: () => listMysqlDeadLetters(db.pool),
      replayAllDead: async () => (await replayMysqlDeadLetters(db.pool, { allDead: true })).length,
      close: () => db.drop(),
    };
  },
};

describeStoreConformance(mariadb, await mariadb.available());
