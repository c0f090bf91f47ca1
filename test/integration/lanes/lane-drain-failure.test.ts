import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createLaneDispatcher,
  fromPg,
  type OutgoingMessage,
  type PublishOutcome,
  type SqlExecutor,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';

/**
 * A drain whose call fails must not, on giving its lanes back, commit the cursor moves of a batch
 * whose failures the lost call was to park: the failed message would be passed by its cursor and
 * never parked (lost). The next drain starts from the cursors as committed instead.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db?.drop());

describe('lanes drain after a failed call', () => {
  it('publishes again what the failed call was to park, in order', async () => {
    const written = await enqueueLanes(db.pool, [
      { topic: 'flaky', aggregateId: 'a', payload: { n: 1 } },
      { topic: 'flaky', aggregateId: 'a', payload: { n: 2 } },
    ]);
    const published: string[] = [];
    let failPublish = true;
    const publisher = {
      publish: async (messages: readonly OutgoingMessage[]): Promise<PublishOutcome[]> =>
        messages.map((m) => {
          if (failPublish) return { status: 'retryable', error: 'down' };
          published.push(m.id);
          return { status: 'published' };
        }),
    };
    // The second outbox_lane_next call (the one that carries the first batch's parks) fails.
    let calls = 0;
    const pool = fromPg(db.pool);
    const executor: SqlExecutor = {
      query: (text, values, options) => {
        if (text.includes('outbox_lane_next(') && ++calls === 2)
          return Promise.reject(new Error('connection lost'));
        return pool.query(text, values, options);
      },
    };
    const first = createLaneDispatcher({
      executor,
      publisher,
      id: 'first',
      backoff: { baseMs: 0, maxMs: 0, jitterMs: 0 },
    });
    await expect(first.drain()).rejects.toThrow('connection lost');
    failPublish = false;
    const second = createLaneDispatcher({ executor: pool, publisher, id: 'second' });
    await second.drain();
    expect(published).toEqual(written.map((m) => m.messageId));
  });
});
