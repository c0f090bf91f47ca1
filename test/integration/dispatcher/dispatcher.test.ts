import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  createDispatcher,
  fromPg,
  InMemoryPublisher,
  PgOutboxStore,
  readShadowComparison,
  readStatus,
  replayDeadLetters,
  listDeadLetters,
  type OutboxStore,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { checkHistory, expectedOf, eventsInOrder } from '../../helpers/history.js';
import {
  enqueueCommitted,
  manyMessages,
  resetOutbox,
  slowDispatcher,
} from '../../helpers/outbox-fixtures.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());
beforeEach(async () => {
  await resetOutbox(db.pool, { also: ['outbox_route_pauses'] });
});

/** A wake source that records the dispatcher's calls; `wake()` wakes the dispatcher. */
function recordingWakeSource() {
  const calls: string[] = [];
  let wakeDispatcher: () => void = () => undefined;
  const wakeSource = {
    start: async (w: () => void) => void (wakeDispatcher = w),
    idle: async () => void calls.push('idle'),
    busy: async () => void calls.push('busy'),
    stop: async () => void calls.push('stop'),
  };
  return { calls, wakeSource, wake: () => wakeDispatcher() };
}

const fast = { backoff: { baseMs: 0, maxMs: 0, jitterMs: 0 }, pollIntervalMs: 20 };

describe('polling dispatcher', () => {
  it('publishes every committed message once, in per-aggregate order, and marks it dispatched', async () => {
    const enqueued = await enqueueCommitted(db.pool, manyMessages(20, 5));
    const publisher = new InMemoryPublisher();
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      batchSize: 7,
      ...fast,
    });
    const result = await dispatcher.drain();
    expect(result.published).toBe(100);
    expect(result.failed).toBe(false);
    const report = checkHistory(expectedOf(enqueued), eventsInOrder(publisher.published));
    expect(report).toMatchObject({ lost: [], orderViolations: [], duplicates: 0 });
    const status = await readStatus(fromPg(db.pool));
    expect(status).toMatchObject({ backlog: 0, deadLetters: 0, inFlight: 0 });
    const { rows } = await db.pool.query(
      'SELECT count(*)::int AS n FROM outbox_messages WHERE dispatched_at IS NOT NULL AND lease_owner IS NULL AND attempts = 1',
    );
    expect(rows[0].n).toBe(100);
  });

  it('claims an ordered aggregate as one run in sequence order, and every unordered message', async () => {
    await enqueueCommitted(db.pool, [
      ...manyMessages(1, 3, 'payment.charge'),
      ...manyMessages(1, 3, 'mail.send').map((m) => ({
        ...m,
        aggregateId: 'mail-agg',
        ordered: false,
      })),
    ]);
    const store = new PgOutboxStore(fromPg(db.pool));
    const request = { batchSize: 100, leaseMs: 60_000 };
    const claimed = await store.claim({ ...request, owner: 't#1' });
    const run = claimed.filter((m) => m.topic === 'payment.charge');
    expect(run.map((m) => [m.sequence, m.ordered])).toEqual([
      [1, undefined],
      [2, undefined],
      [3, undefined],
    ]);
    expect(claimed.filter((m) => m.topic === 'mail.send').map((m) => m.ordered)).toEqual([
      false,
      false,
      false,
    ]);
    // Under a live lease, nothing more of that aggregate is eligible.
    expect(await store.claim({ ...request, owner: 't#2' })).toEqual([]);
  });

  it('late commit: a transaction holding a lower id is neither skipped nor overtaken', async () => {
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher: new InMemoryPublisher(),
      ...fast,
    });
    const late = await db.pool.connect();
    const other = await db.pool.connect();
    try {
      // A takes the lower id for aggregate X and stays open.
      await late.query('BEGIN');
      const a = await late.query<{ id: string }>(
        `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('X', 'payment.charge', '{"n":"A"}') RETURNING id`,
      );
      // Y commits a higher id first; an id-watermark reader would now move past A's id.
      await other.query(
        `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('Y', 'payment.charge', '{"n":"Y"}')`,
      );
      // B writes the same aggregate X: it waits on X's sequence counter until A commits, so it
      // cannot commit first and cannot take a sequence before A.
      const bDone = other.query<{ id: string; sequence: string }>(
        `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('X', 'payment.charge', '{"n":"B"}') RETURNING id, sequence`,
      );
      const first = await dispatcher.drain();
      expect(first.published).toBe(1); // Y only
      await new Promise((resolve) => setTimeout(resolve, 100));
      await late.query('COMMIT');
      const b = await bDone;
      expect(Number(b.rows[0]!.id)).toBeGreaterThan(Number(a.rows[0]!.id));
      expect(Number(b.rows[0]!.sequence)).toBe(2);
      const publisher = new InMemoryPublisher();
      const second = createDispatcher({ executor: fromPg(db.pool), publisher, ...fast });
      await second.drain();
      expect(publisher.published.map((m) => (m.payload as { n: string }).n)).toEqual(['A', 'B']);
    } finally {
      late.release();
      other.release();
    }
  });

  it('a poison message is dead-lettered after maxAttempts, blocks only its aggregate (hold), and replays', async () => {
    await enqueueCommitted(db.pool, [
      { topic: 'payment.charge', aggregateId: 'poison', payload: { n: 1 } },
      { topic: 'payment.charge', aggregateId: 'poison', payload: { n: 2 } },
      ...manyMessages(10, 2),
    ]);
    const publisher = new InMemoryPublisher({
      inject: (m) =>
        m.aggregateId === 'poison'
          ? { status: 'retryable', error: 'receiver 503 token=abc123secret' }
          : undefined,
    });
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      maxAttempts: 3,
      ...fast,
    });
    const result = await dispatcher.drain();
    expect(result.failed).toBe(true);
    expect(result.deadLettered).toBe(1);
    expect(result.published).toBe(20);
    const dead = await listDeadLetters(fromPg(db.pool));
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({ aggregateId: 'poison', sequence: 1, attempts: 3 });
    expect(dead[0]!.lastError).toMatch(/gave up after 3 attempts/);
    expect(dead[0]!.lastError).not.toContain('abc123secret');
    // hold: message 2 of the poisoned aggregate waits behind the dead letter.
    const status = await readStatus(fromPg(db.pool));
    expect(status).toMatchObject({ backlog: 1, deadLetters: 1 });

    publisher.setFailureInjector(undefined);
    const replayed = await replayDeadLetters(fromPg(db.pool), { ids: [dead[0]!.messageId] });
    expect(replayed).toHaveLength(1);
    const after = await createDispatcher({ executor: fromPg(db.pool), publisher, ...fast }).drain();
    expect(after.published).toBe(2);
    const poisonOrder = publisher.published
      .filter((m) => m.aggregateId === 'poison')
      .map((m) => m.sequence);
    expect(poisonOrder).toEqual([1, 2]);
  });

  it('dead-letter policy skip lets later messages of the aggregate go', async () => {
    await enqueueCommitted(db.pool, [
      { topic: 'payment.charge', aggregateId: 'p', payload: { n: 1 } },
      { topic: 'payment.charge', aggregateId: 'p', payload: { n: 2 } },
    ]);
    const publisher = new InMemoryPublisher({
      inject: (m) =>
        m.sequence === 1 ? { status: 'permanent', error: '400 bad request' } : undefined,
    });
    const result = await createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      deadLetterPolicy: 'skip',
      ...fast,
    }).drain();
    expect(result).toMatchObject({ deadLettered: 1, published: 1 });
    const dead = await listDeadLetters(fromPg(db.pool));
    expect(dead[0]).toMatchObject({ sequence: 1, attempts: 1 });
    expect(dead[0]!.lastError).toMatch(/^permanent: 400/);
  });

  it('a retryable failure schedules the next attempt with backoff; a Retry-After pauses the route instead (issue 27)', async () => {
    const [one] = await enqueueCommitted(db.pool, [
      { topic: 't', aggregateId: 'a', payload: 1 },
      { topic: 't', aggregateId: 'c', payload: 3 },
    ]);
    const publisher = new InMemoryPublisher({
      inject: (m) =>
        m.aggregateId === 'a'
          ? { status: 'retryable', error: 'down' }
          : m.aggregateId === 'b'
            ? { status: 'retryable', error: '429', retryAfterMs: 120_000 }
            : undefined,
    });
    const dispatcher = () =>
      createDispatcher({
        executor: fromPg(db.pool),
        publisher,
        backoff: { baseMs: 30_000, maxMs: 900_000, jitterMs: 5_000 },
      });
    // The destination works (c went out): a's failure is its own, charged and backed off.
    await dispatcher().drain();
    const row = async (messageId: string) =>
      (
        await db.pool.query<{ delay_ms: number; attempts: number; last_error: string | null }>(
          `SELECT extract(epoch FROM available_at - now()) * 1000 AS delay_ms, attempts, last_error
           FROM outbox WHERE message_id = $1`,
          [messageId],
        )
      ).rows[0]!;
    const a = await row(one!.messageId);
    expect(a.attempts).toBe(1);
    expect(a.last_error).toBe('down');
    expect(Number(a.delay_ms)).toBeGreaterThan(28_000);
    expect(Number(a.delay_ms)).toBeLessThan(36_000);
    // Retry-After: the destination asked the route to wait, not one message; no attempt charged.
    const [two] = await enqueueCommitted(db.pool, [{ topic: 't', aggregateId: 'b', payload: 2 }]);
    await dispatcher().drain();
    const b = await row(two!.messageId);
    expect(Number(b.delay_ms)).toBeGreaterThan(118_000);
    expect(b.attempts).toBe(0);
    const { rows } = await db.pool.query('SELECT route FROM outbox_route_pauses');
    expect(rows).toEqual([{ route: '*' }]);
  });

  it('contract (b): publish succeeds, marking dispatched fails → the next run publishes the same message again', async () => {
    const [message] = await enqueueCommitted(db.pool, [
      { topic: 'payment.charge', aggregateId: 'order:1', payload: { amount: 5 } },
    ]);
    const real = new PgOutboxStore(fromPg(db.pool));
    const failingSettle: OutboxStore = {
      claim: (r) => real.claim(r),
      release: (o, ids) => real.release(o, ids),
      settle: async () => Promise.reject(new Error('connection lost')),
    };
    const publisher = new InMemoryPublisher();
    // The dispatcher retries a failed settle while it holds the lease (200, 400, ... ms), so the
    // lease must comfortably outlast those retries for the "nobody may take it" check below.
    const first = createDispatcher({ store: failingSettle, publisher, leaseMs: 10_000, ...fast });
    const firstResult = await first.drain();
    expect(firstResult.settleFailures).toBe(1);
    expect(publisher.published.map((m) => m.id)).toEqual([message!.messageId]);
    const { rows } = await db.pool.query('SELECT dispatched_at FROM outbox_messages');
    expect(rows[0].dispatched_at).toBeNull();
    // Before the lease expires nobody may take it; after, the next run publishes it again.
    expect(
      (await createDispatcher({ executor: fromPg(db.pool), publisher, ...fast }).drain()).published,
    ).toBe(0);
    await expect
      .poll(
        async () =>
          (await db.pool.query('SELECT lease_expires_at < now() AS expired FROM outbox')).rows[0]
            .expired,
        { timeout: 15_000 },
      )
      .toBe(true);
    const second = await createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      ...fast,
    }).drain();
    expect(second.published).toBe(1);
    expect(publisher.published.map((m) => m.id)).toEqual([message!.messageId, message!.messageId]);
    expect(publisher.published[1]!.attempts).toBe(2);
  });

  it('fencing: a settle from an expired claim does not touch a row another claim now holds', async () => {
    await enqueueCommitted(db.pool, [{ topic: 't', aggregateId: 'a', payload: 1 }]);
    const store = new PgOutboxStore(fromPg(db.pool));
    const request = { batchSize: 10, deadLettersBlock: true };
    const [old] = await store.claim({ ...request, owner: 'old#1', leaseMs: 1 });
    await new Promise((resolve) => setTimeout(resolve, 20));
    const [current] = await store.claim({ ...request, owner: 'new#1', leaseMs: 60_000 });
    expect(current!.id).toBe(old!.id);
    const settle = { deadLettersBlock: true, leaseMs: 60_000 };
    expect(await store.settle('old#1', [{ rowId: old!.rowId, kind: 'published' }], settle)).toEqual(
      { settled: [], deferred: [] },
    );
    const { rows } = await db.pool.query('SELECT lease_owner, dispatched_at FROM outbox_messages');
    expect(rows[0]).toMatchObject({ lease_owner: 'new#1', dispatched_at: null });
    expect(
      await store.settle('new#1', [{ rowId: current!.rowId, kind: 'published' }], settle),
    ).toEqual({ settled: [current!.rowId], deferred: [] });
  });

  it('a message claimed more than maxAttempts times without settling is dead-lettered, not published', async () => {
    await enqueueCommitted(db.pool, [{ topic: 't', aggregateId: 'crashy', payload: 1 }]);
    await db.pool.query('UPDATE outbox SET attempts = 3');
    const publisher = new InMemoryPublisher();
    const result = await createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      maxAttempts: 3,
      ...fast,
    }).drain();
    expect(result.deadLettered).toBe(1);
    expect(publisher.published).toEqual([]);
    expect((await listDeadLetters(fromPg(db.pool)))[0]!.lastError).toMatch(/never settled/);
  });

  it('a publisher that throws or miscounts outcomes yields retryable outcomes, not a crash', async () => {
    await enqueueCommitted(db.pool, [{ topic: 't', aggregateId: 'a', payload: 1 }]);
    const throwing = { publish: async () => Promise.reject(new Error('socket hang up')) };
    const r1 = await createDispatcher({
      executor: fromPg(db.pool),
      publisher: throwing,
      backoff: { baseMs: 60_000 },
    }).drain();
    expect(r1).toMatchObject({ retried: 1, failed: true });
    await db.pool.query('UPDATE outbox SET available_at = now()');
    const miscounting = { publish: async () => [] };
    const r2 = await createDispatcher({
      executor: fromPg(db.pool),
      publisher: miscounting,
      backoff: { baseMs: 60_000 },
    }).drain();
    expect(r2.retried).toBe(1);
    const { rows } = await db.pool.query('SELECT last_error, attempts FROM outbox');
    expect(rows[0]).toMatchObject({
      attempts: 2,
      last_error: 'publisher returned 0 outcomes for 1 messages',
    });
  });

  it('start/stop: delivers what arrives while running, wake() skips the poll wait, stop() finishes in-flight work', async () => {
    const publisher = new InMemoryPublisher();
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      pollIntervalMs: 60_000,
    });
    dispatcher.start();
    await dispatcher.onIdle();
    await enqueueCommitted(db.pool, manyMessages(3, 1));
    dispatcher.wake();
    await expect.poll(() => publisher.published.length, { timeout: 10_000 }).toBe(3);
    await dispatcher.onIdle();
    await dispatcher.stop();
    expect(dispatcher.state).toBe('stopped');
    const { rows } = await db.pool.query(
      'SELECT count(*)::int AS n FROM outbox WHERE lease_owner IS NOT NULL',
    );
    expect(rows[0].n).toBe(0);
  });

  it('keeps running when its Postgres connection is killed (pg_terminate_backend)', async () => {
    const publisher = new InMemoryPublisher();
    const claimFailures: Error[] = [];
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      pollIntervalMs: 50,
    });
    dispatcher.on('dispatcher:claim:failure', ({ error }) => claimFailures.push(error));
    dispatcher.start();
    await enqueueCommitted(db.pool, manyMessages(2, 1));
    await expect.poll(() => publisher.published.length, { timeout: 10_000 }).toBe(2);
    await db.pool.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
    );
    // Written through a pool of its own: an idle connection of db.pool, ended too, can be handed
    // out before its end arrives (lane-by-ids-prepared's write failed so in CI).
    const writer = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      await enqueueCommitted(
        writer,
        manyMessages(2, 1).map((m) => ({ ...m, aggregateId: `${m.aggregateId}-after` })),
      );
    } finally {
      await writer.end();
    }
    await expect.poll(() => publisher.published.length, { timeout: 20_000 }).toBe(4);
    await dispatcher.stop();
  });

  it('a wake source is armed when idle (then one more claim), disarmed when work is found, and its wake-ups replace polling', async () => {
    const { calls, wakeSource, wake } = recordingWakeSource();
    const publisher = new InMemoryPublisher();
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      pollIntervalMs: 600_000,
      wakeSource,
    });
    dispatcher.start();
    await expect.poll(() => calls).toEqual(['idle']);
    await enqueueCommitted(db.pool, manyMessages(2, 1));
    wake();
    await expect.poll(() => publisher.published.length, { timeout: 10_000 }).toBe(2);
    await expect.poll(() => dispatcher.onIdle().then(() => true)).toBe(true);
    // Found work: disarmed (producers stop notifying); found nothing again: re-armed.
    await expect.poll(() => calls).toEqual(['idle', 'busy', 'idle']);
    await dispatcher.stop();
    expect(calls.at(-1)).toBe('stop');
  });

  it('a busy dispatcher stays disarmed while its claims find work, and re-arms once per idle spell', async () => {
    const { calls, wakeSource } = recordingWakeSource();
    const { dispatcher, published } = slowDispatcher(db.pool, 20, {
      pollIntervalMs: 600_000,
      unorderedTopics: ['*'],
      wakeSource,
    });
    dispatcher.start();
    await expect.poll(() => calls).toEqual(['idle']);
    for (const burst of [1, 2]) {
      await enqueueCommitted(db.pool, manyMessages(6, 1));
      dispatcher.wake();
      await expect.poll(() => published.published.length, { timeout: 10_000 }).toBe(6 * burst);
      await expect.poll(() => dispatcher.onIdle().then(() => true)).toBe(true);
    }
    // Six claims with work per burst, one disarm each; one re-arm per empty claim after it.
    await expect.poll(() => calls).toEqual(['idle', 'busy', 'idle', 'busy', 'idle']);
    await dispatcher.stop();
  });

  it('shadow messages are settled as dispatched without reaching the publisher, and counted apart', async () => {
    await enqueueCommitted(db.pool, [
      { topic: 'mail.send', aggregateId: 's1', payload: 1, shadow: true },
      { topic: 'mail.send', aggregateId: 's1', payload: 2, shadow: true },
      { topic: 'mail.send', aggregateId: 'l1', payload: 3 },
    ]);
    const publisher = new InMemoryPublisher();
    const result = await createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      ...fast,
    }).drain();
    expect(result).toMatchObject({ published: 1, shadowed: 2, failed: false });
    expect(publisher.published.map((m) => m.aggregateId)).toEqual(['l1']);
    const comparison = await readShadowComparison(fromPg(db.pool));
    expect(comparison).toEqual([
      { topic: 'mail.send', shadow: 2, live: 1, shadowDispatched: 2, liveDispatched: 1 },
    ]);
  });
});
