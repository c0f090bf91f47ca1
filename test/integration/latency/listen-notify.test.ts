import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  createDispatcher,
  fromPg,
  InMemoryPublisher,
  type Dispatcher,
} from '../../../src/index.js';
import {
  createListenNotifyWakeSource,
  type ListenNotifyWakeSource,
} from '../../../src/dispatcher/wake/listen-notify.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted, manyMessages, slowDispatcher } from '../../helpers/outbox-fixtures.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());
beforeEach(async () => {
  await db.pool.query('TRUNCATE outbox, outbox_aggregates, outbox_waiters');
});

const APP = 'ao-listen-test';
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function listenClient(): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString: db.url,
    keepAlive: true,
    application_name: APP,
  });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

function wakeSource(): ListenNotifyWakeSource {
  return createListenNotifyWakeSource({
    connect: listenClient,
    heartbeatMs: 500,
    waiterTtlMs: 5_000,
    reconnectDelay: { minMs: 50, maxMs: 500 },
  });
}

/**
 * A plain LISTEN on another connection that records notifications up to a sentinel. NOTIFYs are
 * delivered in commit order, so "nothing before the sentinel" proves nothing was sent by the
 * transactions committed before it — no waiting for a silence that proves nothing.
 */
async function observer() {
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  const seen: string[] = [];
  let onSentinel: (() => void) | undefined;
  client.on('notification', ({ channel, payload }) => {
    if (payload === 'sentinel') onSentinel?.();
    else seen.push(channel);
  });
  await client.query('LISTEN public_outbox');
  cleanups.push(() => client.end());
  return {
    /** Notifications received before a sentinel sent now. */
    async countUntilSentinel(): Promise<number> {
      const arrived = new Promise<void>((resolve) => (onSentinel = resolve));
      await db.pool.query(`SELECT pg_notify('public_outbox', 'sentinel')`);
      await arrived;
      const n = seen.length;
      seen.length = 0;
      return n;
    },
  };
}

function startDispatcher(source: ListenNotifyWakeSource) {
  const publisher = new InMemoryPublisher();
  const dispatcher: Dispatcher = createDispatcher({
    executor: fromPg(db.pool),
    publisher,
    pollIntervalMs: 60_000, // only a wake-up can deliver within the test's 10 s poll timeout
    wakeSource: source,
  });
  let claims = 0;
  dispatcher.on('dispatcher:claim:success', () => claims++);
  dispatcher.start();
  cleanups.push(() => dispatcher.stop());
  return { dispatcher, publisher, claims: () => claims };
}

const liveWaiters = async () =>
  (
    await db.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM outbox_waiters WHERE expires_at > clock_timestamp()',
    )
  ).rows[0]!.n;

describe('LISTEN/NOTIFY wake source', () => {
  it('a message committed while the dispatcher is idle is published without waiting for the poll interval', async () => {
    const source = wakeSource();
    const { publisher, claims } = startDispatcher(source);
    // Idle and armed: the waiter row is there.
    await expect.poll(liveWaiters, { timeout: 10_000 }).toBe(1);
    const claimsBefore = claims();
    const [sent] = await enqueueCommitted(db.pool, [
      { topic: 'payment.charge', aggregateId: 'order:1', payload: { n: 1 } },
    ]);
    await expect
      .poll(() => publisher.published.map((m) => m.id), { timeout: 10_000 })
      .toEqual([sent!.messageId]);
    // Not a busy loop: once delivered, the dispatcher goes quiet (the poll interval is a minute,
    // so any claim in the next second would be a loop). A second is dozens of claims for a loop.
    const quiet = async () => {
      const before = claims();
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      return claims() - before;
    };
    await expect.poll(quiet, { timeout: 10_000, interval: 0 }).toBe(0);
    // And a handful of claims on the way, counted from the armed state: the claim right after
    // arming, the one behind the source's connect-time wake(), the wake-up's claim, the one
    // behind its settle, one before re-arming and one after, and one skipped sleep for a NOTIFY
    // that arrived while a claim was running (CI saw 6 of these 7).
    expect(claims() - claimsBefore).toBeLessThanOrEqual(7);
  });

  it('sends no NOTIFY while no dispatcher waits, and at most one per transaction while one does', async () => {
    const watch = await observer();
    await enqueueCommitted(db.pool, manyMessages(10, 2));
    expect(await watch.countUntilSentinel()).toBe(0);

    // An expired waiter row (a crashed dispatcher) does not make producers notify.
    await db.pool.query(
      `INSERT INTO outbox_waiters VALUES ('crashed', clock_timestamp() - interval '1 second')`,
    );
    await enqueueCommitted(db.pool, manyMessages(1, 1));
    expect(await watch.countUntilSentinel()).toBe(0);

    // A live waiter: one notification for a 500-message transaction, one per transaction.
    await db.pool.query(
      `INSERT INTO outbox_waiters VALUES ('live', clock_timestamp() + interval '1 minute')`,
    );
    await enqueueCommitted(db.pool, manyMessages(50, 10));
    expect(await watch.countUntilSentinel()).toBe(1);
    // Plain INSERTs (another language, no writer) notify too; two transactions → two.
    await db.pool.query(
      `INSERT INTO outbox (aggregate_id, topic, payload) SELECT 'x' || g, 't', '{}' FROM generate_series(1, 3) g`,
    );
    await enqueueCommitted(db.pool, manyMessages(1, 1));
    expect(await watch.countUntilSentinel()).toBe(2);
    // A rolled-back transaction notifies nobody.
    const client = await db.pool.connect();
    await client.query('BEGIN');
    await client.query(`INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('r', 't', '{}')`);
    await client.query('ROLLBACK');
    client.release();
    expect(await watch.countUntilSentinel()).toBe(0);
  });

  it('a dispatcher that finds work removes its waiter row, so producers stop notifying; idle again, it re-arms', async () => {
    const { dispatcher, published: publisher } = slowDispatcher(db.pool, 100, {
      pollIntervalMs: 60_000,
      wakeSource: wakeSource(),
    });
    dispatcher.start();
    cleanups.push(() => dispatcher.stop());
    await expect.poll(liveWaiters, { timeout: 10_000 }).toBe(1);
    // 10 batches of 100 ms: busy for a second; the first claim that finds work disarms.
    await enqueueCommitted(db.pool, manyMessages(10, 1)); // wakes it
    await expect.poll(liveWaiters, { timeout: 10_000 }).toBe(0);
    expect(publisher.published.length).toBeLessThan(10); // disarmed while still busy
    const watch = await observer();
    await enqueueCommitted(db.pool, manyMessages(1, 1));
    expect(await watch.countUntilSentinel()).toBe(0); // producers do not notify meanwhile
    await expect.poll(() => publisher.published.length, { timeout: 10_000 }).toBe(11);
    await expect.poll(liveWaiters, { timeout: 10_000 }).toBe(1); // idle again, re-armed
    await dispatcher.stop();
    expect(await liveWaiters()).toBe(0); // stop() removes the row
  });

  it('pg_terminate_backend of the LISTEN connection: reconnects, catches up on what was written meanwhile, and wake-ups resume', async () => {
    // Reconnects wait at this gate until the test opens it, so the source is deaf while we write.
    let openGate: () => void = () => undefined;
    let gate: Promise<void> = Promise.resolve();
    const source = createListenNotifyWakeSource({
      connect: async () => {
        await gate;
        return listenClient();
      },
      heartbeatMs: 500,
      waiterTtlMs: 5_000,
      reconnectDelay: { minMs: 50, maxMs: 500 },
    });
    const opened: boolean[] = [];
    source.on('listen:connection:open', ({ reconnect }) => opened.push(reconnect));
    const { publisher } = startDispatcher(source);
    await expect.poll(liveWaiters, { timeout: 10_000 }).toBe(1);

    gate = new Promise<void>((resolve) => (openGate = resolve));
    cleanups.push(async () => openGate());
    const lost = new Promise<void>((resolve) =>
      source.on('listen:connection:lost', () => resolve()),
    );
    const killed = await db.pool.query<{ ok: boolean }>(
      `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = $1 AND datname = $2`,
      [APP, db.name],
    );
    expect(killed.rows.map((r) => r.ok)).toEqual([true]);
    await lost;
    expect(source.listening).toBe(false);

    // Written while nobody listens: its NOTIFY (the waiter row is still live) reaches no one; only
    // the catch-up claim after the reconnect can find it before the 60 s poll.
    await db.pool.query(
      `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('meanwhile', 'payment.charge', '{}')`,
    );
    expect(publisher.published).toEqual([]);
    openGate();

    await expect
      .poll(() => publisher.published.map((m) => m.aggregateId), { timeout: 10_000 })
      .toEqual(['meanwhile']);
    expect(opened).toEqual([false, true]);
    expect(source.listening).toBe(true);

    // Wake-ups work on the new connection.
    await expect.poll(liveWaiters, { timeout: 10_000 }).toBe(1);
    await enqueueCommitted(db.pool, [
      { topic: 'payment.charge', aggregateId: 'after', payload: {} },
    ]);
    await expect
      .poll(() => publisher.published.map((m) => m.aggregateId), { timeout: 10_000 })
      .toEqual(['meanwhile', 'after']);
  });
});
