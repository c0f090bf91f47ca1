import {
  laneStatus,
  listLaneDeadLetters,
  replayLaneDeadLetters,
} from '../../src/lanes/lane-admin.js';
import { createLaneDispatcher } from '../../src/lanes/lane-dispatcher.js';
import { fromPg } from '../../src/store/from-pg.js';
import { createOutbox } from '../../src/writer/create-outbox.js';
import { startCli } from '../helpers/cli-process.js';
import { createTestDatabase } from '../helpers/database.js';
import { pgWriteOrder } from './pg-write-order.js';
import { describeStoreConformance } from './store-conformance.js';
import type { ConformanceTarget } from './store-under-test.js';

/**
 * Postgres with the lanes engine (migration 024): the lanes writer (`createOutbox({ engine:
 * 'lanes' })`), `createLaneDispatcher`, `outbox dispatch --engine lanes` and the lanes admin
 * functions. What the suite counts is read through `laneStatus`: pending is the backlog after
 * the cursors plus what is parked and not dead; "leased" is the backlog of lanes under a live
 * lease (read by their owner, not yet moved past).
 *
 * Not here: the contract-level claim/settle tests (the lanes engine is no OutboxStore: it fences
 * by lane) and the attempts count after a kill (a message published again after a crash counts
 * no attempt: nothing is written per publish). The suite skips both, saying so.
 */
const postgresLanes: ConformanceTarget = {
  name: 'Postgres (lanes engine)',
  available: () => Promise.resolve(true),
  dispatchProcess: (args) => startCli([...args, '--engine', 'lanes']),
  async open() {
    const db = await createTestDatabase();
    await db.pool.query('CREATE TABLE orders (id text PRIMARY KEY)');
    const outbox = createOutbox({ engine: 'lanes' });
    const executor = fromPg(db.pool);
    const count = async (sql: string) => (await db.pool.query<{ n: number }>(sql)).rows[0]!.n;
    return {
      url: db.url,
      writeOrder: pgWriteOrder(db.pool, outbox),
      enqueueOutsideTransaction: (message) => outbox.enqueue(executor, message),
      orders: () => count('SELECT count(*)::int AS n FROM orders'),
      messages: () => count('SELECT count(*)::int AS n FROM outbox_lane_messages'),
      leased: async () =>
        (await laneStatus(executor)).lanes
          .filter((l) => l.leased)
          .reduce((n, l) => n + l.backlog, 0),
      pending: async () => {
        const { total } = await laneStatus(executor);
        return total.backlog + total.parked + total.retrying;
      },
      dispatcher: (options) =>
        createLaneDispatcher({
          executor,
          publisher: options.publisher,
          ...(options.backoff && { backoff: options.backoff }),
          ...(options.maxAttempts !== undefined && { maxAttempts: options.maxAttempts }),
          ...(options.deadLetterPolicy && { deadLetterPolicy: options.deadLetterPolicy }),
          ...(options.batchSize !== undefined && { batchSize: options.batchSize }),
          ...(options.leaseMs !== undefined && { leaseMs: options.leaseMs }),
        }),
      deadLetters: () => listLaneDeadLetters(executor),
      replayAllDead: async () => (await replayLaneDeadLetters(executor)).length,
      close: () => db.drop(),
    };
  },
};

describeStoreConformance(postgresLanes, await postgresLanes.available());
