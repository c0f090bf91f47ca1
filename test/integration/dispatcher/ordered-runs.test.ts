import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  addUnorderedTopics,
  createDispatcher,
  fromPg,
  InMemoryPublisher,
  PgOutboxStore,
  repairHeads,
  replayDeadLetters,
  type OutboxStore,
  type OutgoingMessage,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted, resetOutbox } from '../../helpers/outbox-fixtures.js';

/** Issue 16: ordered runs, their failure handling, and the settle that waits for a writer. */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());
beforeEach(async () => {
  await resetOutbox(db.pool, { also: ['outbox_unordered_topics'] });
});

const noBackoff = { backoff: { baseMs: 0, maxMs: 0, jitterMs: 0 }, pollIntervalMs: 20 };

async function rows(aggregateId: string) {
  const { rows: found } = await db.pool.query<{
    sequence: string;
    dispatched_at: Date | null;
    attempts: number;
    available_at: Date;
    lease_owner: string | null;
    ready: boolean;
    last_error: string | null;
  }>(
    // Pending and dispatched alike: a published message has left `outbox` for the dispatched
    // log (migration 018), where it is kept with `ready` false.
    `SELECT sequence, dispatched_at, attempts, available_at, lease_owner, ready, last_error
     FROM outbox_messages WHERE aggregate_id = $1 ORDER BY sequence`,
    [aggregateId],
  );
  return found;
}

describe('ordered runs', () => {
  it('a run whose third message fails: 1-2 published, 3 backs off, 4.. released with attempts unchanged; order kept next time', async () => {
    await enqueueCommitted(
      db.pool,
      Array.from({ length: 6 }, (_, n) => ({
        topic: 'payment.charge',
        aggregateId: 'A',
        payload: { n },
      })),
    );
    let failThird = true;
    const publisher = new InMemoryPublisher({
      inject: (m) =>
        failThird && m.sequence === 3 ? { status: 'retryable', error: 'broker hiccup' } : undefined,
    });
    const calls: number[][] = [];
    const recording = {
      publish: (messages: readonly OutgoingMessage[]) => {
        calls.push(messages.map((m) => m.sequence));
        return publisher.publish(messages);
      },
    };
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher: recording,
      batchSize: 10,
      backoff: { baseMs: 60_000, maxMs: 60_000, jitterMs: 0 },
    });
    const first = await dispatcher.drain();
    // One claim took the whole run; messages went one call at a time and stopped at the failure.
    expect(calls).toEqual([[1], [2], [3]]);
    expect(first).toMatchObject({ claimed: 6, published: 2, retried: 1, released: 3 });
    const after = await rows('A');
    expect(after.map((r) => r.dispatched_at !== null)).toEqual([
      true,
      true,
      false,
      false,
      false,
      false,
    ]);
    expect(after.map((r) => r.attempts)).toEqual([1, 1, 1, 0, 0, 0]);
    expect(after.map((r) => r.lease_owner)).toEqual([null, null, null, null, null, null]);
    expect(after[2]!.last_error).toContain('broker hiccup');
    expect(after[2]!.available_at.getTime()).toBeGreaterThan(Date.now() + 50_000);
    expect(after[3]!.last_error).toBeNull();
    // 3 is the head now; 4.. wait behind it, not in the claim's index (1-2 are in the
    // dispatched log, never ready there).
    expect(after.map((r) => r.ready)).toEqual([false, false, true, false, false, false]);

    // While 3 backs off nothing of A is claimable.
    const store = new PgOutboxStore(fromPg(db.pool));
    expect(await store.claim({ owner: 'probe#1', batchSize: 10, leaseMs: 1_000 })).toEqual([]);

    // Once due, the run resumes from 3, in order.
    failThird = false;
    await db.pool.query(`UPDATE outbox SET available_at = now() WHERE aggregate_id = 'A'`);
    calls.length = 0;
    const second = await dispatcher.drain();
    expect(second).toMatchObject({ published: 4, released: 0 });
    expect(calls).toEqual([[3], [4], [5], [6]]);
    expect(publisher.published.map((m) => m.sequence)).toEqual([1, 2, 3, 4, 5, 6]);
    expect((await rows('A')).map((r) => r.attempts)).toEqual([1, 1, 2, 1, 1, 1]);
  });

  it('aggregates go in parallel: each publish call carries the next message of every aggregate', async () => {
    await enqueueCommitted(
      db.pool,
      ['A', 'B', 'C'].flatMap((a) =>
        [1, 2, 3].map((n) => ({ topic: 'payment.charge', aggregateId: a, payload: { n } })),
      ),
    );
    const calls: string[][] = [];
    const inner = new InMemoryPublisher();
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher: {
        publish: (messages) => {
          calls.push(messages.map((m) => `${m.aggregateId}${m.sequence}`).sort());
          return inner.publish(messages);
        },
      },
      batchSize: 9,
      ...noBackoff,
    });
    await dispatcher.drain();
    expect(calls).toEqual([
      ['A1', 'B1', 'C1'],
      ['A2', 'B2', 'C2'],
      ['A3', 'B3', 'C3'],
    ]);
  });

  it('a publisher that orders within a call gets a whole run in one call, and its failure stops the run', async () => {
    await enqueueCommitted(
      db.pool,
      [1, 2, 3, 4].map((n) => ({ topic: 'payment.charge', aggregateId: 'A', payload: { n } })),
    );
    const calls: number[][] = [];
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher: {
        ordersWithinCall: true,
        publish: async (messages) => {
          calls.push(messages.map((m) => m.sequence));
          let failed = false;
          return messages.map((m) => {
            failed ||= m.sequence === 2;
            return failed
              ? { status: 'retryable' as const, error: m.sequence === 2 ? 'down' : 'not sent' }
              : { status: 'published' as const };
          });
        },
      },
      batchSize: 10,
      backoff: { baseMs: 60_000, maxMs: 60_000, jitterMs: 0 },
    });
    const result = await dispatcher.drain();
    expect(calls).toEqual([[1, 2, 3, 4]]);
    expect(result).toMatchObject({ published: 1, retried: 1, released: 2 });
    expect((await rows('A')).map((r) => r.attempts)).toEqual([1, 1, 0, 0]);
  });

  it('under the skip policy a dead run member leaves the chain and its successor goes next', async () => {
    await enqueueCommitted(
      db.pool,
      [1, 2, 3].map((n) => ({ topic: 'payment.charge', aggregateId: 'A', payload: { n } })),
    );
    const publisher = new InMemoryPublisher({
      inject: (m) => (m.sequence === 2 ? { status: 'permanent', error: 'rejected' } : undefined),
    });
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      batchSize: 10,
      deadLetterPolicy: 'skip',
      ...noBackoff,
    });
    const result = await dispatcher.drain();
    expect(result).toMatchObject({ published: 2, deadLettered: 1 });
    expect(publisher.published.map((m) => m.sequence)).toEqual([1, 3]);

    // It died in the middle of a run (never marked ready): a replay must still send it.
    publisher.setFailureInjector(undefined);
    expect(await replayDeadLetters(fromPg(db.pool), { allDead: true })).toHaveLength(1);
    expect(await dispatcher.drain()).toMatchObject({ published: 1 });
    expect(publisher.published.map((m) => m.sequence)).toEqual([1, 3, 2]);
  });
});

describe('the settle that ends a chain while a writer of its aggregate is mid-transaction', () => {
  it('is deferred (rows stay leased, lease extended), and goes through once the writer commits; the new message is then ready', async () => {
    await enqueueCommitted(db.pool, [{ topic: 'payment.charge', aggregateId: 'A', payload: 1 }]);
    const store = new PgOutboxStore(fromPg(db.pool));
    const [head] = await store.claim({ owner: 'd#1', batchSize: 10, leaseMs: 5_000 });
    expect(head!.sequence).toBe(1);

    // A writer inserts message 2 of A and stays open: it sees 1 pending, so 2 is not ready.
    const writer = await db.pool.connect();
    try {
      await writer.query('BEGIN');
      await writer.query(
        `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('A', 'payment.charge', '2')`,
      );
      const settle = { deadLettersBlock: true, leaseMs: 60_000 };
      const deferred = await store.settle(
        'd#1',
        [{ rowId: head!.rowId, kind: 'published' }],
        settle,
      );
      expect(deferred).toEqual({ settled: [], deferred: [head!.rowId] });
      const [held] = await rows('A');
      expect(held).toMatchObject({ dispatched_at: null, lease_owner: 'd#1' });
      await writer.query('COMMIT');

      const done = await store.settle('d#1', [{ rowId: head!.rowId, kind: 'published' }], settle);
      expect(done).toEqual({ settled: [head!.rowId], deferred: [] });
    } finally {
      writer.release();
    }
    const after = await rows('A');
    expect(after.map((r) => [r.dispatched_at !== null, r.ready])).toEqual([
      [true, false],
      [false, true],
    ]);
    const [next] = await store.claim({ owner: 'd#2', batchSize: 10, leaseMs: 5_000 });
    expect(next!.sequence).toBe(2);
  });

  it('a dispatcher retries a deferred settle by itself and delivers what the writer committed', async () => {
    await enqueueCommitted(db.pool, [{ topic: 'payment.charge', aggregateId: 'A', payload: 1 }]);
    const writer = await db.pool.connect();
    const publisher = new InMemoryPublisher();
    const dispatcher = createDispatcher({ executor: fromPg(db.pool), publisher, ...noBackoff });
    try {
      // The writer takes A's counter row before the dispatcher settles message 1.
      await writer.query('BEGIN');
      await writer.query(
        `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('A', 'payment.charge', '2')`,
      );
      dispatcher.start();
      await expect.poll(() => dispatcher.stats().deferred, { timeout: 10_000 }).toBeGreaterThan(0);
      expect(publisher.published.map((m) => m.sequence)).toEqual([1]);
      await writer.query('COMMIT');
      await expect.poll(() => publisher.published.length, { timeout: 10_000 }).toBe(2);
      expect(publisher.published.map((m) => m.sequence)).toEqual([1, 2]);
    } finally {
      writer.release();
      await dispatcher.stop();
    }
    expect(dispatcher.stats()).toMatchObject({ published: 2, fenced: 0 });
  });

  it('a deferred settle whose retries keep failing is given up one lease after its last answer', async () => {
    await enqueueCommitted(db.pool, [{ topic: 'payment.charge', aggregateId: 'A', payload: 1 }]);
    const inner = new PgOutboxStore(fromPg(db.pool));
    let settles = 0;
    const store: OutboxStore = {
      claim: (request) => inner.claim(request),
      release: (owner, ids) => inner.release(owner, ids),
      // The first settle is deferred (as with a writer mid-transaction); then the database
      // "goes away": every retry fails.
      settle: async (_owner, settlements) => {
        if (settles++ === 0) return { settled: [], deferred: settlements.map((s) => s.rowId) };
        throw new Error('connection terminated');
      },
    };
    const dispatcher = createDispatcher({
      store,
      publisher: new InMemoryPublisher(),
      leaseMs: 600,
      ...noBackoff,
    });
    const started = Date.now();
    const result = await dispatcher.drain();
    expect(Date.now() - started).toBeLessThan(30_000);
    // Given up (counted as a settle failure); the lease then expired and drain claimed the
    // message again, whose settle failed too: nothing was marked, nothing lost.
    expect(result).toMatchObject({ published: 0, deferred: 1, failed: true });
    expect(result.settleFailures).toBeGreaterThanOrEqual(1);
    expect(settles).toBeGreaterThan(2);
    const { rows: left } = await db.pool.query(`SELECT dispatched_at FROM outbox_messages`);
    expect(left).toEqual([{ dispatched_at: null }]);
  });

  it('a REPEATABLE READ writer whose snapshot predates the settle fails to serialise instead of leaving its message stuck', async () => {
    await enqueueCommitted(db.pool, [{ topic: 'payment.charge', aggregateId: 'A', payload: 1 }]);
    const store = new PgOutboxStore(fromPg(db.pool));
    const [head] = await store.claim({ owner: 'rr#1', batchSize: 10, leaseMs: 5_000 });
    const writer = await db.pool.connect();
    try {
      await writer.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await writer.query('SELECT 1 FROM outbox LIMIT 1'); // takes the snapshot: 1 is pending
      const settled = await store.settle('rr#1', [{ rowId: head!.rowId, kind: 'published' }], {
        deadLettersBlock: true,
        leaseMs: 5_000,
      });
      expect(settled.settled).toEqual([head!.rowId]);
      await expect(
        writer.query(
          `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('A', 'payment.charge', '2')`,
        ),
      ).rejects.toMatchObject({ code: '40001' });
      await writer.query('ROLLBACK');
    } finally {
      writer.release();
    }
    // The retry (a new transaction) sees 1 dispatched: 2 is the head.
    await db.pool.query(
      `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('A', 'payment.charge', '2')`,
    );
    expect((await rows('A')).map((r) => [r.dispatched_at !== null, r.ready])).toEqual([
      [true, false],
      [false, true],
    ]);
  });
});

describe('heads left unmarked by a dispatcher older than migration 009', () => {
  it('are not claimed until repaired; repairHeads marks them, and a starting dispatcher does it itself for seven days after an upgrade across 009', async () => {
    await enqueueCommitted(
      db.pool,
      ['A', 'B'].flatMap((a) =>
        [1, 2, 3].map((n) => ({ topic: 'payment.charge', aggregateId: a, payload: { n } })),
      ),
    );
    // What the old settle did: dispatched, and nobody marked 2 ready.
    await db.pool.query(`UPDATE outbox SET dispatched_at = now() WHERE sequence = 1`);
    const store = new PgOutboxStore(fromPg(db.pool));
    expect(await store.claim({ owner: 'old#1', batchSize: 10, leaseMs: 1_000 })).toEqual([]);

    expect(await repairHeads(fromPg(db.pool))).toBe(2);
    expect(await repairHeads(fromPg(db.pool))).toBe(0);
    await db.pool.query(
      `UPDATE outbox SET ready = false WHERE aggregate_id = 'B' AND sequence = 2`,
    );

    // Installed fresh (migration 009 applied with 001): no older dispatcher ever ran, so a
    // starting dispatcher does not pay for the repair (sql/heads-repair.ts) and B stays put.
    const drain = async () => {
      const publisher = new InMemoryPublisher();
      await createDispatcher({ executor: fromPg(db.pool), publisher, ...noBackoff }).drain();
      return publisher.published.map((m) => `${m.aggregateId}${m.sequence}`).sort();
    };
    expect(await drain()).toEqual(['A2', 'A3']);
    // Upgraded across 009 an hour after the install: for seven days, a starting dispatcher
    // repairs the heads itself.
    const migrations = await db.pool.query<{ version: number; applied_at: Date }>(
      `SELECT version, applied_at FROM outbox_migrations WHERE version IN (1, 9)`,
    );
    try {
      await db.pool.query(
        `UPDATE outbox_migrations SET applied_at = now() - interval '1 hour' WHERE version = 1`,
      );
      expect(await drain()).toEqual(['B2', 'B3']);
      // A new head of A (A2 and A3 have left the outbox for the dispatched log), left unmarked.
      await enqueueCommitted(db.pool, [
        { topic: 'payment.charge', aggregateId: 'A', payload: { n: 4 } },
      ]);
      const unmarked = await db.pool.query(`UPDATE outbox SET ready = false WHERE aggregate_id = 'A'
        AND id IN (SELECT id FROM outbox WHERE aggregate_id = 'A' ORDER BY sequence DESC LIMIT 1)
        AND sequence = 4 AND dispatched_at IS NULL AND ready`);
      expect(unmarked.rowCount).toBe(1);
      // Eight days after that upgrade: no more automatic repair.
      await db.pool.query(
        `UPDATE outbox_migrations SET applied_at = now() - interval '8 days' WHERE version = 9`,
      );
      await db.pool.query(
        `UPDATE outbox_migrations SET applied_at = now() - interval '9 days' WHERE version = 1`,
      );
      expect(await drain()).toEqual([]);
      expect(await repairHeads(fromPg(db.pool))).toBe(1);
      expect(await drain()).toEqual(['A4']);
    } finally {
      for (const m of migrations.rows)
        await db.pool.query(`UPDATE outbox_migrations SET applied_at = $2 WHERE version = $1`, [
          m.version,
          m.applied_at,
        ]);
    }
  });
});

describe('which topics are ordered is decided when a message is written', () => {
  it('outbox_unordered_topics applies to plain INSERTs; ordered: false per message; neither depends on a dispatcher', async () => {
    expect(await addUnorderedTopics(fromPg(db.pool), ['mail.*'])).toEqual(['mail.*']);
    expect(await addUnorderedTopics(fromPg(db.pool), ['mail.*'])).toEqual([]);
    await db.pool.query(
      `INSERT INTO outbox (aggregate_id, topic, payload)
       VALUES ('A', 'payment.charge', '1'), ('A', 'mail.send', '2'), ('A', 'payment.charge', '3')`,
    );
    await enqueueCommitted(db.pool, [
      { topic: 'payment.refund', aggregateId: 'A', payload: 4, ordered: false },
    ]);
    const { rows: found } = await db.pool.query<{
      topic: string;
      ordered: boolean;
      ready: boolean;
    }>(`SELECT topic, ordered, ready FROM outbox ORDER BY sequence`);
    expect(found).toEqual([
      { topic: 'payment.charge', ordered: true, ready: true },
      { topic: 'mail.send', ordered: false, ready: true },
      { topic: 'payment.charge', ordered: true, ready: false },
      { topic: 'payment.refund', ordered: false, ready: true },
    ]);
  });

  it('two dispatchers started with different unordered lists cannot break the order of a message written as ordered', async () => {
    await enqueueCommitted(
      db.pool,
      [1, 2, 3, 4].map((n) => ({ topic: 'mail.send', aggregateId: 'A', payload: { n } })),
    );
    const publisher = new InMemoryPublisher();
    const one = createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      batchSize: 1,
      unorderedTopics: ['mail.*'],
      ...noBackoff,
    });
    const two = createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      batchSize: 1,
      ...noBackoff,
    });
    await Promise.all([one.drain(), two.drain()]);
    // Written before anyone declared mail.* unordered: ordered, whoever sends it.
    expect(publisher.published.map((m) => m.sequence)).toEqual([1, 2, 3, 4]);
    // The declaration applies to what is written from then on.
    const [later] = await enqueueCommitted(db.pool, [
      { topic: 'mail.send', aggregateId: 'A', payload: 5 },
    ]);
    const { rows: found } = await db.pool.query(`SELECT ordered FROM outbox WHERE id = $1`, [
      later!.id,
    ]);
    expect(found[0].ordered).toBe(false);
  });
});
