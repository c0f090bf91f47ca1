import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createDispatcher, fromPg, InMemoryPublisher, type Publisher } from '../../../src/index.js';
import { DestinationLimits } from '../../../src/dispatcher/destination-limits.js';
import type { OutgoingMessage } from '../../../src/publishers/publisher.js';
import { HttpPublisher } from '../../../src/publishers/http/index.js';
import { busiestWindow } from '../../helpers/busiest-window.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { checkHistory, eventsInOrder, expectedOf } from '../../helpers/history.js';
import { enqueueCommitted, manyMessages } from '../../helpers/outbox-fixtures.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

let db: TestDatabase;
let receiver: WebhookReceiver;
let down = false;
let requests = 0;
beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startWebhookReceiver({
    status: () => {
      requests++;
      return down ? 503 : 200;
    },
  });
});
afterAll(async () => {
  await receiver.close();
  await db.drop();
});
beforeEach(async () => {
  down = false;
  requests = 0;
  await db.pool.query(
    'TRUNCATE outbox, outbox_aggregates, outbox_route_pauses, outbox_rate_limits',
  );
});

const fast = {
  backoff: { baseMs: 50, maxMs: 100, jitterMs: 0 },
  pollIntervalMs: 20,
  maxAttempts: 3,
  routePause: { afterFailures: 3, initialMs: 200, maxMs: 400 },
};

const count = async (sql: string) => (await db.pool.query<{ n: number }>(sql)).rows[0]!.n;

/** `n` limited messages, each on its own aggregate, as a gate sees them. */
const charges = (who: string, n: number): OutgoingMessage[] =>
  Array.from({ length: n }, (_, i) => ({
    id: `${who}-${i}`,
    rowId: `${who}${i}`,
    topic: 'payment.charge',
    aggregateId: `${who}-${i}`,
    sequence: 1,
    payload: {},
    headers: {},
    createdAt: new Date(),
    attempts: 0,
  }));

/** A gate on the `public` schema's buckets, one per dispatcher. */
const gateOf = () =>
  new DestinationLimits({
    executor: fromPg(db.pool),
    schema: 'public',
    routeOf: (topic) => topic,
    pause: {},
    leaseMs: 30_000,
  });

describe('destination health (issue 27)', () => {
  it('an outage pauses the route: no attempts charged, no dead letters, all delivered after it', async () => {
    await enqueueCommitted(db.pool, manyMessages(20, 3));
    down = true;
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher: new HttpPublisher({ url: receiver.url }),
      batchSize: 10,
      ...fast,
    });
    dispatcher.start();
    await expect.poll(() => count('SELECT count(*)::int AS n FROM outbox_route_pauses')).toBe(1);
    // Far longer than three attempt budgets (3 attempts at 50-100 ms backoff).
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    const duringOutage = requests;
    expect(
      await count('SELECT count(*)::int AS n FROM outbox WHERE dead_lettered_at IS NOT NULL'),
    ).toBe(0);
    expect(await count('SELECT coalesce(max(attempts), 0)::int AS n FROM outbox')).toBeLessThan(3);
    down = false;
    await expect.poll(() => receiver.distinct(), { timeout: 20_000 }).toBe(60);
    await dispatcher.stop();
    expect(await count('SELECT count(*)::int AS n FROM outbox_route_pauses')).toBe(0);
    expect(
      await count('SELECT count(*)::int AS n FROM outbox WHERE dead_lettered_at IS NOT NULL'),
    ).toBe(0);
    // Paused: probes only, one at a time (a few a second), not 60 messages per backoff.
    expect(duringOutage).toBeLessThan(60);
    expect(dispatcher.stats().postponed).toBeGreaterThan(0);
  });

  it('a message failing on its own while the destination works is still retried and dead-lettered', async () => {
    const publisher: Publisher = {
      publish: async (messages) =>
        messages.map((m) =>
          (m.payload as { a: number }).a === 0
            ? { status: 'retryable', error: 'only this one fails' }
            : { status: 'published' },
        ),
    };
    await enqueueCommitted(db.pool, manyMessages(5, 1));
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      ...fast,
      backoff: { baseMs: 0, maxMs: 0, jitterMs: 0 },
    });
    await dispatcher.drain();
    await expect
      .poll(async () => {
        await dispatcher.drain();
        return count('SELECT count(*)::int AS n FROM outbox WHERE dead_lettered_at IS NOT NULL');
      })
      .toBe(1);
    expect(await count('SELECT count(*)::int AS n FROM outbox_route_pauses')).toBe(0);
  });

  it('Retry-After pauses the route at once, for as long as it says', async () => {
    const publisher: Publisher = {
      publish: async (messages) =>
        messages.map(() => ({ status: 'retryable', error: '429', retryAfterMs: 5_000 })),
    };
    await enqueueCommitted(db.pool, manyMessages(2, 1));
    const dispatcher = createDispatcher({ executor: fromPg(db.pool), publisher, ...fast });
    await dispatcher.drain();
    const { rows } = await db.pool.query(
      `SELECT route, reason, paused_until > now() + interval '4 seconds' AS long FROM outbox_route_pauses`,
    );
    expect(rows).toEqual([
      { route: '*', reason: expect.stringMatching(/Retry-After/), long: true },
    ]);
    expect(await count('SELECT max(attempts)::int AS n FROM outbox')).toBe(0);
  });

  it('a Retry-After part-way through a batch pauses the route and charges none of what it turned away', async () => {
    // A broker that confirms the first messages of a batch and then blocks publishers (RabbitMQ's
    // connection.blocked), or a webhook that answers 429 after a few: the destination stopped
    // working part-way, so G9 holds for the rest of the batch.
    let confirmed = 0;
    let blocked = true;
    const publisher: Publisher = {
      publish: async (messages) =>
        messages.map(() =>
          !blocked || confirmed++ < 2
            ? { status: 'published' }
            : { status: 'retryable', error: 'blocked', retryAfterMs: 300 },
        ),
    };
    await enqueueCommitted(db.pool, manyMessages(2, 4));
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      ...fast,
    });
    await dispatcher.drain();
    const { rows: pauses } = await db.pool.query('SELECT route, reason FROM outbox_route_pauses');
    expect(pauses).toEqual([{ route: '*', reason: expect.stringMatching(/Retry-After/) }]);
    const { rows } = await db.pool.query<{ charged: number; pending: number }>(
      `SELECT count(*) FILTER (WHERE attempts > 0)::int AS charged, count(*)::int AS pending
       FROM outbox WHERE dispatched_at IS NULL`,
    );
    expect(rows[0]).toEqual({ charged: 0, pending: 6 });
    blocked = false;
    await expect
      .poll(
        async () => {
          await dispatcher.drain();
          return count('SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NULL');
        },
        { timeout: 10_000 },
      )
      .toBe(0);
    expect(
      await count('SELECT count(*)::int AS n FROM outbox WHERE dead_lettered_at IS NOT NULL'),
    ).toBe(0);
  });
});

describe('rate limits (issue 27)', () => {
  it('one limit for two dispatchers: the rate stays near it, nothing is charged, order holds', async () => {
    const enqueued = await enqueueCommitted(db.pool, manyMessages(10, 6));
    const publisher = new InMemoryPublisher();
    const make = () =>
      createDispatcher({
        executor: fromPg(db.pool),
        publisher,
        batchSize: 20,
        ...fast,
        rateLimits: [{ pattern: 'payment.*', perSecond: 20, burst: 5 }],
      });
    const a = make();
    const b = make();
    const started = Date.now();
    a.start();
    b.start();
    await expect.poll(() => publisher.published.length, { timeout: 20_000 }).toBe(60);
    const seconds = (Date.now() - started) / 1000;
    await Promise.all([a.stop(), b.stop()]);
    // 60 messages at 20/s with a burst of 5: about 2.75 s; never much faster.
    expect(seconds).toBeGreaterThan(2.2);
    const report = checkHistory(expectedOf(enqueued), eventsInOrder(publisher.published));
    expect(report).toMatchObject({ lost: [], orderViolations: [], duplicates: 0 });
    expect(await count('SELECT max(attempts)::int AS n FROM outbox_messages')).toBe(1);
    const { rows } = await db.pool.query('SELECT pattern, taken::int FROM outbox_rate_limits');
    expect(rows).toEqual([{ pattern: 'payment.*', taken: 60 }]);
  });

  it('dispatchers refused tokens by one limit are given slots after one another, not the same ones (migration 035)', async () => {
    // 10/s with a burst of 1: a slot is 100 ms. A takes the one token and is refused four, B is
    // refused five. Each dispatcher used to place what it was refused from the bucket's next
    // token after its own earlier refusals only: A's and B's landed on the same slots, and at
    // each slot one of them was refused again (a claim and a deferral more, and slots left idle
    // while the other waited for its own). The bucket's `queued_until` places them in turn.
    await db.pool.query(
      `INSERT INTO outbox_rate_limits (pattern, per_second, burst, tokens) VALUES ('payment.*', 10, 1, 1)`,
    );
    const aAt = Date.now();
    const a = await gateOf().gate('a', charges('a', 5));
    const b = await gateOf().gate('b', charges('b', 5));
    // Each call's delays count from its own statement's clock: B's from a later one, by up to
    // the two calls' time (20 ms on a loaded machine once made a 100 ms step read 79.5).
    const callsMs = Date.now() - aAt;
    expect(a.send).toHaveLength(1);
    expect(b.send).toHaveLength(0);
    const delays = [...a.held, ...b.held]
      .map((s) => (s.kind === 'defer' ? s.delayMs : Number.NaN))
      .sort((x, y) => x - y);
    expect(delays).toHaveLength(9);
    // Nine slots in a row, about 100 ms apart (the same slot twice would be ~0 apart).
    delays.slice(1).forEach((delay, i) => expect(delay - delays[i]!).toBeGreaterThan(80 - callsMs));
    expect(delays[0]).toBeGreaterThan(0);
    expect(delays[8]).toBeGreaterThan(800);
    expect(delays[8]).toBeLessThan(1_000);
    const { rows } = await db.pool.query<{ aheadMs: number }>(
      `SELECT (extract(epoch FROM queued_until - now()) * 1000)::float8 AS "aheadMs" FROM outbox_rate_limits`,
    );
    expect(rows[0]!.aheadMs).toBeGreaterThan(800);
  });

  it('a take that finds the bucket full forgets slots handed out whose messages never came back', async () => {
    // Slots handed out an hour ahead (a backlog since skipped, say), and the bucket full: had
    // those messages come, they would have taken its tokens. Refused messages now wait for the
    // next tokens, not behind the hour.
    await db.pool.query(
      `INSERT INTO outbox_rate_limits (pattern, per_second, burst, tokens, queued_until)
       VALUES ('payment.*', 10, 1, 1, now() + interval '1 hour')`,
    );
    const { send, held } = await gateOf().gate('a', charges('m', 3));
    expect(send).toHaveLength(1);
    const delays = held.map((s) => (s.kind === 'defer' ? s.delayMs : Number.NaN));
    expect(delays).toHaveLength(2);
    for (const delay of delays) expect(delay).toBeLessThan(1_000);
  });

  it('a pause in taking while a backlog waits carries over a quarter of a second’s tokens, not the burst', async () => {
    // 40/s, burst 40, nobody took for two seconds. With slots handed out past the last take (a
    // backlog waiting: lanes changing hands, say), the late messages used to find the whole
    // burst and go out at once on top of the rate (bench rate_limit_window_max_ratio 1.10).
    const bucket = (pattern: string, queuedUntil: string) =>
      db.pool.query(
        `INSERT INTO outbox_rate_limits (pattern, per_second, burst, tokens, refilled_at, queued_until)
         VALUES ($1, 40, 40, 0, now() - interval '2 seconds', ${queuedUntil})`,
        [pattern],
      );
    await bucket('payment.*', `now() - interval '1 second'`);
    const backlog = await gateOf().gate('a', charges('late', 60));
    expect(backlog.send).toHaveLength(10);
    // The rest wait for the next tokens, one slot each (25 ms), from now: not behind the slots
    // whose messages were late.
    const delays = backlog.held.map((s) => (s.kind === 'defer' ? s.delayMs : Number.NaN));
    expect(delays).toHaveLength(50);
    expect(Math.min(...delays)).toBeLessThan(100);
    expect(Math.max(...delays)).toBeLessThan(50 * 25 + 100);
    // No backlog (no slot past the last take): the burst, as before.
    await db.pool.query('TRUNCATE outbox_rate_limits');
    await bucket('payment.*', `'-infinity'`);
    expect((await gateOf().gate('a', charges('quiet', 60))).send).toHaveLength(40);
  });

  it('three dispatchers on their own pools deliver the limit while a backlog waits, and no window exceeds it (issue 43)', async () => {
    // Long polls, as `outbox dispatch` with LISTEN/NOTIFY (5 s): nothing announces a deferred
    // message coming due, so a dispatcher that slept its poll out left the bucket idle (61 % of
    // the limit, then the idle tokens at once).
    const perSecond = 30;
    const total = 240;
    const enqueued = await enqueueCommitted(db.pool, manyMessages(60, 4));
    const publisher = new InMemoryPublisher();
    const at: number[] = [];
    const timed: Publisher = {
      publish: async (messages) => {
        for (const _ of messages) at.push(performance.now());
        return await publisher.publish(messages);
      },
    };
    const pools = [0, 1, 2].map(() => new pg.Pool({ connectionString: db.url, max: 4 }));
    const dispatchers = pools.map((pool) =>
      createDispatcher({
        executor: fromPg(pool),
        publisher: timed,
        pollIntervalMs: 5_000,
        rateLimits: [{ pattern: 'payment.*', perSecond }],
      }),
    );
    try {
      dispatchers.forEach((d) => d.start());
      await expect.poll(() => at.length, { timeout: 60_000, interval: 200 }).toBe(total);
    } finally {
      await Promise.all(dispatchers.map((d) => d.stop()));
      await Promise.all(pools.map((pool) => pool.end()));
    }
    const burst = perSecond; // the default
    // The shared limit, seen at the publish calls: the tokens are taken in the database before,
    // so a stalled event loop on a loaded 2-core machine bunches calls a little; the slack below
    // is for that, not for the limit. No second carries much more than the limit plus the burst,
    // and once the first burst is spent, no two seconds much more than the limit — with a
    // backlog waiting the bucket never fills again (bench: rate_limit_window_max_ratio).
    expect(busiestWindow(at, 1_000)).toBeLessThanOrEqual(perSecond + burst + 10);
    expect(busiestWindow(at, 2_000, at[0]! + 1_000)).toBeLessThanOrEqual(
      Math.ceil(2 * perSecond * 1.5),
    );
    // Delivered near the limit while the backlog waits: without the wake-ups, 240 took 35 s
    // (6/s against 30/s); half the limit is the bar here, the rate itself is the bench's
    // (rate_limit_utilisation, 1.00 on a quiet machine).
    const seconds = (at.at(-1)! - at[0]!) / 1000;
    expect((total - burst) / seconds, `${total} in ${seconds} s`).toBeGreaterThanOrEqual(
      0.5 * perSecond,
    );
    const report = checkHistory(expectedOf(enqueued), eventsInOrder(publisher.published));
    expect(report).toMatchObject({ lost: [], orderViolations: [], duplicates: 0 });
    expect(await count('SELECT max(attempts)::int AS n FROM outbox_messages')).toBe(1);
  }, 90_000);
});
