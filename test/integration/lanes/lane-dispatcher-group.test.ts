import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../../src/core/errors.js';
import type { OutboxMessage } from '../../../src/core/message.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import type { OutgoingMessage, Publisher } from '../../../src/publishers/publisher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes, listenWakeSource, armed } from '../../helpers/lanes.js';

/**
 * `createLaneDispatcher({ concurrency })`: that many lane dispatchers in one process on disjoint
 * lanes (src/lanes/lane-dispatcher-group.ts), driven as one.
 */
let db: TestDatabase;

beforeEach(async () => {
  db = await createTestDatabase();
});
afterEach(async () => {
  await db.drop();
});

const write = (messages: OutboxMessage[]) => enqueueLanes(db.pool, messages);

/** Records what it is given, and which member's batch (by the call's overlap) it came in. */
function recorder() {
  const published: OutgoingMessage[] = [];
  let inCall = 0;
  let overlapped = 0;
  const publisher: Publisher = {
    publish: async (messages) => {
      inCall++;
      if (inCall > 1) overlapped++;
      // A wait, as any real publisher makes: another member's batch may be published meanwhile.
      // A few milliseconds, not a setImmediate: under CI's load one member drained its lanes
      // between the other's turns, and no two calls overlapped.
      await new Promise((resolve) => setTimeout(resolve, 5));
      published.push(...messages);
      inCall--;
      return messages.map(() => ({ status: 'published' as const }));
    },
  };
  return { publisher, published, overlapped: () => overlapped };
}

const count = async (sql: string) => Number((await db.pool.query<{ n: string }>(sql)).rows[0]!.n);

describe('lanes engine: concurrency', () => {
  it('runs that many owners on disjoint lanes; a drain publishes each message once, each aggregate in order', async () => {
    for (let t = 0; t < 20; t++)
      await write(
        Array.from({ length: 100 }, (_, i) => ({
          topic: 'payment.charge',
          aggregateId: `order-${i % 37}`,
          payload: { n: t * 100 + i },
        })),
      );
    const { publisher, published, overlapped } = recorder();
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher,
      id: 'grouped',
      concurrency: 2,
      batchSize: 50,
    });
    expect(dispatcher.id).toBe('grouped');
    const result = await dispatcher.drain();
    expect(result.published).toBe(2_000);
    expect(result.failed).toBe(false);
    expect(dispatcher.stats().published).toBe(2_000);
    expect(new Set(published.map((m) => m.id)).size).toBe(2_000);
    const sequences = new Map<string, number[]>();
    for (const m of published)
      sequences.set(m.aggregateId, [...(sequences.get(m.aggregateId) ?? []), m.sequence]);
    expect(sequences.size).toBe(37);
    for (const [, seq] of sequences) expect(seq).toEqual(seq.map((_, i) => i + 1));
    // Both members published, and at the same time at least once.
    expect(overlapped()).toBeGreaterThan(0);
  });

  it('holds the lanes as two owners of eight each while running, and gives them back on stop', async () => {
    const { publisher } = recorder();
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher,
      id: 'pair',
      concurrency: 2,
    });
    dispatcher.start();
    try {
      await dispatcher.onIdle();
      const { rows } = await db.pool.query<{ owner: string; n: string }>(
        `SELECT owner, count(*) AS n FROM outbox_lanes WHERE owner IS NOT NULL
         GROUP BY owner ORDER BY owner`,
      );
      expect(rows.map((r) => [r.owner, Number(r.n)])).toEqual([
        ['pair/0', 8],
        ['pair/1', 8],
      ]);
    } finally {
      await dispatcher.stop();
    }
    expect(dispatcher.state).toBe('stopped');
    expect(await count('SELECT count(*) AS n FROM outbox_lanes WHERE owner IS NOT NULL')).toBe(0);
  });

  it('shares one LISTEN wake source: a write wakes the idle group long before its 60 s poll', async () => {
    const { publisher, published } = recorder();
    let connections = 0;
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher,
      concurrency: 2,
      pollIntervalMs: 60_000,
      wakeSource: listenWakeSource(db.url, () => connections++),
    });
    dispatcher.start();
    try {
      await armed(db.pool);
      await dispatcher.onIdle();
      const started = Date.now();
      // One message per lane's worth of aggregates: both members' lanes get one.
      await write(
        Array.from({ length: 40 }, (_, i) => ({
          topic: 'mail.send',
          aggregateId: `woken-${i}`,
          payload: {},
        })),
      );
      while (published.length < 40 && Date.now() - started < 10_000)
        await new Promise((resolve) => setTimeout(resolve, 10));
      expect(Date.now() - started).toBeLessThan(10_000);
      // Each once: both members are told of all 40 (the NOTIFY names them), each publishes
      // those of its own lanes, and its lane reads skip them.
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(published).toHaveLength(40);
      expect(new Set(published.map((m) => m.id)).size).toBe(40);
      // One LISTEN connection for the group, not one a member.
      expect(connections).toBe(1);
    } finally {
      await dispatcher.stop();
    }
  });

  it('refuses a concurrency that is not an integer from 1 to maxLanes, before anything runs', () => {
    const publisher = recorder().publisher;
    for (const [concurrency, maxLanes] of [
      [0, undefined],
      [1.5, undefined],
      [17, undefined],
      [5, 4],
    ] as const)
      expect(() =>
        createLaneDispatcher({ executor: fromPg(db.pool), publisher, concurrency, maxLanes }),
      ).toThrow(OutboxValidationError);
  });
});
