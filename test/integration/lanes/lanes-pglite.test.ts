import { PGlite } from '@electric-sql/pglite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createDispatcher,
  createOutbox,
  fromPglite,
  InMemoryPublisher,
  migrate,
} from '../../../src/index.js';

/**
 * The lanes engine on embedded PGlite (the demo's database), through the code a schema's record
 * chooses: `createOutbox()` and `createDispatcher()`. PGlite parsed `bigint` into numbers where
 * node-postgres gives text; the lane dispatcher then never moved its cursors and read the same
 * batch for good, never yielding to a timer (fromPglite now asks for the text). The first test
 * fails at once without that; the second then hangs the file.
 */
let db: PGlite;
beforeAll(async () => {
  db = await PGlite.create();
  await migrate(fromPglite(db), { engine: 'lanes' });
});
afterAll(() => db?.close());

describe('the lanes engine on PGlite', () => {
  it('reads bigint as the text Postgres gives, as node-postgres does (past 2^53 too)', async () => {
    const { rows } = await fromPglite(db).query<{ n: unknown; small: unknown }>(
      'SELECT 9007199254740993::bigint AS n, 7::bigint AS small',
    );
    expect(rows[0]).toEqual({ n: '9007199254740993', small: '7' });
  });

  it('publishes in order, retries a failure with its aggregate held behind it, and waits for a delay', async () => {
    const committedAt = Date.now();
    const written = await db.transaction((tx) =>
      createOutbox().enqueue(fromPglite(tx), [
        { topic: 'payment.charge', aggregateId: 'o1', payload: { n: 1 } },
        { topic: 'payment.charge', aggregateId: 'o1', payload: { n: 2 } },
        { topic: 'payment.capture', aggregateId: 'o1', payload: { n: 3 } },
        { topic: 'mail.send', aggregateId: 'o2', payload: { n: 4 }, delayMs: 300 },
      ]),
    );
    const lanes = await db.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM outbox_lane_messages',
    );
    expect(lanes.rows[0]!.n).toBe(4);
    const publisher = new InMemoryPublisher({
      inject: (m) =>
        m.attempts === 1 && (m.payload as { n: number }).n === 2
          ? { status: 'retryable', error: 'down' }
          : undefined,
    });
    const dispatcher = createDispatcher({
      executor: fromPglite(db),
      publisher,
      pollIntervalMs: 20,
      backoff: { baseMs: 200, maxMs: 200, jitterMs: 0 },
    });
    const publishedAt = new Map<string, number>();
    dispatcher.on('dispatcher:publish:outcome', ({ message, outcome }) => {
      if (outcome.status === 'published') publishedAt.set(message.id, Date.now());
    });
    dispatcher.start();
    try {
      await expect.poll(() => publisher.published.length, { timeout: 15_000 }).toBe(4);
    } finally {
      // Bounded: a dispatcher stuck in a read that never ends must not hang the file.
      await Promise.race([dispatcher.stop(), new Promise((r) => setTimeout(r, 2_000))]);
    }
    const o1 = publisher.published.filter((m) => m.aggregateId === 'o1');
    // `attempts` counts the attempt a publisher is given, as on the claim engine.
    expect(o1.map((m) => [m.sequence, m.attempts])).toEqual([
      [1, 1],
      [2, 2],
      [3, 1],
    ]);
    expect(publisher.published.map((m) => m.id).sort()).toEqual(
      written.map((m) => m.messageId).sort(),
    );
    // Due 300 ms after its transaction began.
    const mail = written.find((m) => m.aggregateId === 'o2')!;
    expect(publishedAt.get(mail.messageId)! - committedAt).toBeGreaterThanOrEqual(300);
  });
});
