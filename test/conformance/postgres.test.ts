import { listDeadLetters, replayDeadLetters } from '../../src/admin/dead-letters.js';
import { createDispatcher } from '../../src/dispatcher/dispatcher.js';
import { PgOutboxStore } from '../../src/dispatcher/pg-outbox-store.js';
import { fromPg } from '../../src/store/from-pg.js';
import { createOutbox } from '../../src/writer/create-outbox.js';
import { createTestDatabase } from '../helpers/database.js';
import { pgWriteOrder } from './pg-write-order.js';
import { describeStoreConformance } from './store-conformance.js';
import type { ConformanceTarget } from './store-under-test.js';

const count = async (
  pool: { query: (sql: string) => Promise<{ rows: { n: number }[] }> },
  sql: string,
) => (await pool.query(sql)).rows[0]!.n;

/** Postgres (global-setup.ts already requires the server). */
const postgres: ConformanceTarget = {
  name: 'Postgres',
  available: () => Promise.resolve(true),
  async open() {
    const db = await createTestDatabase();
    await db.pool.query('CREATE TABLE orders (id text PRIMARY KEY)');
    const outbox = createOutbox();
    const executor = fromPg(db.pool);
    return {
      url: db.url,
      writeOrder: pgWriteOrder(db.pool, outbox),
      enqueueOutsideTransaction: (message) => outbox.enqueue(executor, message),
      orders: () => count(db.pool, 'SELECT count(*)::int AS n FROM orders'),
      messages: () => count(db.pool, 'SELECT count(*)::int AS n FROM outbox'),
      leased: () =>
        count(
          db.pool,
          'SELECT count(*)::int AS n FROM outbox WHERE lease_owner IS NOT NULL AND dispatched_at IS NULL',
        ),
      maxAttempts: () =>
        count(db.pool, 'SELECT coalesce(max(attempts), 0)::int AS n FROM outbox_messages'),
      pending: () =>
        count(
          db.pool,
          'SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL',
        ),
      dispatcher: (options) => createDispatcher({ ...options, executor }),
      store: () => new PgOutboxStore(executor),
      deadLetters: () => listDeadLetters(executor),
      replayAllDead: async () => (await replayDeadLetters(executor, { allDead: true })).length,
      close: () => db.drop(),
    };
  },
};

describeStoreConformance(postgres, await postgres.available());
