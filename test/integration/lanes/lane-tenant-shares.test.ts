import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  createLaneDispatcher,
  fromPg,
  type OutboxMessage,
  type OutgoingMessage,
  type PublishOutcome,
  type Publisher,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes, lanesPending } from '../../helpers/lanes.js';

/**
 * Tenant shares on the lanes engine (migration 028, sql/lane-tenant-shares.ts): while tenant A's
 * burst drains to a slow destination, tenant B's messages are published ahead of A's backlog in
 * their lanes, each aggregate still in order (G4), a failure holding only its aggregate.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db?.drop());
beforeEach(async () => {
  await db.pool.query(
    `TRUNCATE outbox_lane_messages, outbox_lane_parked, outbox_lane_ahead, outbox_aggregates;
     UPDATE outbox_lanes SET cursor = 0, pruned_to = 0, owner = NULL, lease_expires_at = NULL`,
  );
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A destination taking `delayMs` a publish call, recording what it accepted and when. */
function slowDestination(
  delayMs: number,
  fail: (m: OutgoingMessage) => boolean = () => false,
): Publisher & { seen: { m: OutgoingMessage; at: number }[] } {
  const seen: { m: OutgoingMessage; at: number }[] = [];
  return {
    seen,
    publish: async (messages): Promise<PublishOutcome[]> => {
      await sleep(delayMs);
      const at = Date.now();
      return messages.map((m) => {
        if (fail(m)) return { status: 'retryable', error: 'refused' };
        seen.push({ m, at });
        return { status: 'published' };
      });
    },
  };
}

/** A's burst: `count` messages on `aggregates` aggregates, tenant `tenant`, in commits of 1,000. */
async function burst(count: number, aggregates: number, tenant = 'tenant-a'): Promise<void> {
  for (let done = 0; done < count; done += 1_000)
    await enqueueLanes(
      db.pool,
      Array.from({ length: Math.min(1_000, count - done) }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: `${tenant}-${(done + i) % aggregates}`,
        payload: { n: done + i },
        tenantId: tenant,
      })),
    );
}

/** Every aggregate's sequences in the order published, first publishes only; none missing. */
function expectInOrder(seen: readonly { m: OutgoingMessage }[]): void {
  const last = new Map<string, number>();
  for (const { m } of seen) {
    const before = last.get(m.aggregateId) ?? 0;
    if (m.sequence <= before) continue; // a duplicate (at-least-once)
    expect(`${m.aggregateId}#${m.sequence}`).toBe(`${m.aggregateId}#${before + 1}`);
    last.set(m.aggregateId, m.sequence);
  }
}

/** A destination recording each publish call's messages; each call waits `delayMs` first. */
function recordingCalls(delayMs: number): Publisher & {
  calls: OutgoingMessage[][];
  callStarted(n: number): Promise<void>;
} {
  const calls: OutgoingMessage[][] = [];
  const waiting = new Map<number, () => void>();
  return {
    calls,
    callStarted: (n) =>
      n <= calls.length ? Promise.resolve() : new Promise((r) => waiting.set(n, r)),
    publish: async (messages): Promise<PublishOutcome[]> => {
      calls.push([...messages]);
      waiting.get(calls.length)?.();
      await sleep(delayMs);
      return messages.map(() => ({ status: 'published' }));
    },
  };
}

/** The 1-based number of the call that carried tenant B's message, and its place in it. */
function bCall(calls: readonly OutgoingMessage[][]): { call: number; index: number } {
  for (const [i, call] of calls.entries()) {
    const index = call.findIndex((m) => m.headers.tenant_id === 'tenant-b');
    if (index >= 0) return { call: i + 1, index };
  }
  return { call: 0, index: -1 };
}

describe('lanes engine: tenant shares (migration 028)', () => {
  it("publishes B's trickle while A's backlog still waits in the same lanes", async () => {
    await burst(12_000, 1_200);
    const destination = slowDestination(5);
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: destination,
      batchSize: 50,
      pollIntervalMs: 20,
    });
    dispatcher.start();
    const committed = new Map<string, number>();
    try {
      // B's trickle: one message every 30 ms on 16 aggregates (so in most lanes), while A drains.
      for (let i = 0; i < 30; i++) {
        const [written] = await enqueueLanes(db.pool, [
          { topic: 'mail.send', aggregateId: `b-${i % 16}`, payload: { i }, tenantId: 'tenant-b' },
        ]);
        committed.set(written!.messageId, Date.now());
        await sleep(30);
      }
      const until = Date.now() + 60_000;
      while (destination.seen.length < 12_030 && Date.now() < until) await sleep(50);
    } finally {
      await dispatcher.stop();
    }
    const seen = destination.seen;
    expect(new Set(seen.map((s) => s.m.id)).size).toBe(12_030);
    expectInOrder(seen);
    const lastA = Math.max(
      ...seen.filter((s) => s.m.headers.tenant_id === 'tenant-a').map((s) => s.at),
    );
    const waits = seen
      .filter((s) => s.m.headers.tenant_id === 'tenant-b')
      .map((s) => s.at - committed.get(s.m.id)!)
      .sort((a, b) => a - b);
    const aDrainMs = lastA - Math.min(...seen.map((s) => s.at));
    console.log(
      `[lane tenant shares] B commit -> publish p50 ${waits[15]} ms, max ${waits[29]} ms (${waits.join(' ')}); A drained in ${aDrainMs} ms`,
    );
    // Every message of B went out before A's backlog ended, and (generously, on a shared
    // machine) each within a third of A's drain: oldest first, B waited behind all of A.
    const lastB = Math.max(
      ...seen.filter((s) => s.m.headers.tenant_id === 'tenant-b').map((s) => s.at),
    );
    expect(lastB).toBeLessThan(lastA);
    expect(waits[29]!).toBeLessThan(aDrainMs / 3);
  }, 120_000);

  it('keeps each aggregate in order, an earlier message behind the batch and of another tenant or none included', async () => {
    // In the middle of A's burst: the first messages of m-0..m-15 without a tenant, and of
    // n-0..n-15 of tenant A; after the burst, their next ones of tenant B, and B's own
    // aggregates. B's must not overtake their aggregates' first messages, which wait in A's
    // backlog beyond the batch.
    await burst(2_000, 400);
    await enqueueLanes(db.pool, [
      ...Array.from({ length: 16 }, (_, i): OutboxMessage => ({
        topic: 'mail.send',
        aggregateId: `m-${i}`,
        payload: { s: 1 },
      })),
      ...Array.from({ length: 16 }, (_, i): OutboxMessage => ({
        topic: 'mail.send',
        aggregateId: `n-${i}`,
        payload: { s: 1 },
        tenantId: 'tenant-a',
      })),
      // And of o-0..o-15 of tenant B itself: its share takes them first.
      ...Array.from({ length: 16 }, (_, i): OutboxMessage => ({
        topic: 'mail.send',
        aggregateId: `o-${i}`,
        payload: { s: 1 },
        tenantId: 'tenant-b',
      })),
    ]);
    await burst(2_000, 400);
    await enqueueLanes(db.pool, [
      ...Array.from({ length: 16 }, (_, i): OutboxMessage[] => [
        { topic: 'mail.send', aggregateId: `m-${i}`, payload: { s: 2 }, tenantId: 'tenant-b' },
        { topic: 'mail.send', aggregateId: `n-${i}`, payload: { s: 2 }, tenantId: 'tenant-b' },
        { topic: 'mail.send', aggregateId: `o-${i}`, payload: { s: 2 }, tenantId: 'tenant-b' },
        { topic: 'mail.send', aggregateId: `b-${i}`, payload: { s: 1 }, tenantId: 'tenant-b' },
        { topic: 'mail.send', aggregateId: `b-${i}`, payload: { s: 2 }, tenantId: 'tenant-b' },
      ]).flat(),
    ]);
    const destination = slowDestination(1);
    await createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: destination,
      batchSize: 50,
    }).drain();
    const seen = destination.seen;
    expect(new Set(seen.map((s) => s.m.id)).size).toBe(4_000 + 48 + 80);
    expectInOrder(seen);
    // The shares did publish B's own aggregates ahead of A's backlog, o-* in order from the
    // middle of it.
    const firstB = seen.findIndex((s) => s.m.aggregateId.startsWith('b-'));
    expect(firstB).toBeLessThan(2_000);
    const lastO = seen.findLastIndex((s) => s.m.aggregateId.startsWith('o-'));
    expect(lastO).toBeLessThan(2_000);
    // Nothing is left recorded ahead once the cursors passed it.
    const { rows } = await db.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM outbox_lane_ahead',
    );
    expect(rows[0]!.n).toBe(0);
    // And the cursors passed what went ahead: nothing is left to publish.
    expect(await lanesPending(db.pool)).toBe(0);
  }, 120_000);

  it("parks a failure of B's message published ahead and holds only its aggregate", async () => {
    await burst(3_000, 300);
    await enqueueLanes(db.pool, [
      ...Array.from({ length: 8 }, (_, i): OutboxMessage[] => [
        { topic: 'mail.send', aggregateId: `b-${i}`, payload: { s: 1 }, tenantId: 'tenant-b' },
        { topic: 'mail.send', aggregateId: `b-${i}`, payload: { s: 2 }, tenantId: 'tenant-b' },
      ]).flat(),
    ]);
    let refuse = true;
    const destination = slowDestination(
      2,
      (m) => refuse && m.aggregateId === 'b-0' && m.sequence === 1,
    );
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: destination,
      batchSize: 50,
      pollIntervalMs: 20,
      backoff: { baseMs: 300, maxMs: 300, jitterMs: 0 },
    });
    dispatcher.start();
    try {
      // While b-0's first message is refused: b-0's second arrives (later in its lane), and
      // the other B aggregates go out ahead of A's backlog.
      const until = Date.now() + 30_000;
      const othersOut = () =>
        destination.seen.filter((s) => /^b-[1-7]$/.test(s.m.aggregateId)).length >= 14;
      while (!othersOut() && Date.now() < until) await sleep(10);
      expect(othersOut()).toBe(true);
      const aLeft =
        3_000 - destination.seen.filter((s) => s.m.aggregateId.startsWith('tenant-a')).length;
      expect(aLeft).toBeGreaterThan(0);
      expect(destination.seen.some((s) => s.m.aggregateId === 'b-0')).toBe(false);
      await enqueueLanes(db.pool, [
        { topic: 'mail.send', aggregateId: 'b-0', payload: { s: 3 }, tenantId: 'tenant-b' },
      ]);
      await sleep(200);
      expect(destination.seen.some((s) => s.m.aggregateId === 'b-0')).toBe(false);
      refuse = false;
      while (destination.seen.length < 3_017 && Date.now() < until) await sleep(20);
    } finally {
      await dispatcher.stop();
    }
    expect(new Set(destination.seen.map((s) => s.m.id)).size).toBe(3_017);
    expectInOrder(destination.seen);
  }, 120_000);

  it("publishes a share first in its batch's call, not after the batch's 500", async () => {
    await burst(100, 100);
    await enqueueLanes(db.pool, [
      { topic: 'mail.send', aggregateId: 'b-0', payload: {}, tenantId: 'tenant-b' },
    ]);
    const destination = recordingCalls(0);
    await createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: destination,
      batchSize: 10,
    }).drain();
    // The first batch came back full of A's: B's message went with it, as its share.
    expect(bCall(destination.calls)).toEqual({ call: 1, index: 0 });
    expect(destination.calls[0]).toHaveLength(11);
    expect(destination.calls.flat()).toHaveLength(101);
  });

  it('reads the next batch as the publish of a slow batch ends, so a share written during it goes next', async () => {
    await burst(100, 100);
    const destination = recordingCalls(250);
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: destination,
      batchSize: 10,
      // The parked path is looked at every poll (at most every second), and never with a batch
      // read ahead: at a poll of 20 ms no batch of 250 ms is read ahead at all.
      pollIntervalMs: 1_000,
    });
    dispatcher.start();
    try {
      // Two publishes of 250 ms tell the dispatcher how long one takes; during the third, B
      // commits. The batch after the third is read as that publish ends, with B's share in it;
      // read as the third began (as before), it had nothing of B, and B went a batch later.
      await destination.callStarted(3);
      await enqueueLanes(db.pool, [
        { topic: 'mail.send', aggregateId: 'b-0', payload: {}, tenantId: 'tenant-b' },
      ]);
      const until = Date.now() + 30_000;
      while (destination.calls.flat().length < 101 && Date.now() < until) await sleep(20);
    } finally {
      await dispatcher.stop();
    }
    expect(bCall(destination.calls)).toEqual({ call: 4, index: 0 });
    expect(new Set(destination.calls.flat().map((m) => m.id)).size).toBe(101);
  }, 60_000);

  it('a dispatcher after a stop does not publish again what was published ahead', async () => {
    await burst(3_000, 300);
    await enqueueLanes(
      db.pool,
      Array.from({ length: 32 }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: `b-${i % 16}`,
        payload: { i },
        tenantId: 'tenant-b',
      })),
    );
    const destination = slowDestination(0);
    // The first drain ends after 3 batches (its outcome committed: what went ahead recorded).
    let batches = 0;
    await createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: destination,
      batchSize: 50,
      stopDrain: () => ++batches > 3,
    }).drain();
    const ahead = destination.seen.filter((s) => s.m.aggregateId.startsWith('b-')).length;
    expect(ahead).toBeGreaterThan(0);
    await createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: destination,
      batchSize: 50,
    }).drain();
    expect(destination.seen).toHaveLength(3_032);
    expect(new Set(destination.seen.map((s) => s.m.id)).size).toBe(3_032);
    expectInOrder(destination.seen);
    const { rows } = await db.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM outbox_lane_ahead',
    );
    expect(rows[0]!.n).toBe(0);
    // And the cursors passed what went ahead: nothing is left to publish.
    expect(await lanesPending(db.pool)).toBe(0);
  }, 120_000);
});
