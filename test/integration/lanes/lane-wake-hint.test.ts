import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { OutboxMessage } from '../../../src/core/message.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import type { OutgoingMessage, Publisher } from '../../../src/publishers/publisher.js';
import { notifyChannel } from '../../../src/sql/notify.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes, listenWakeSource, armed } from '../../helpers/lanes.js';
import { recordingExecutor } from '../../helpers/recording-executor.js';
import type { SqlExecutor } from '../../../src/store/sql-executor.js';
import type { WakeSource } from '../../../src/dispatcher/wake-source.js';
import { createOutbox } from '../../../src/writer/create-outbox.js';

/**
 * The lanes writer's NOTIFY names the messages nothing can come before (sql/lanes.ts); an idle
 * lane dispatcher publishes those at once, read by primary key, instead of reading its lanes
 * (lane-dispatcher.ts `#publishHinted`, issue 43's latency).
 */
let db: TestDatabase;
beforeEach(async () => {
  db = await createTestDatabase();
});
afterEach(async () => {
  await db.drop();
});

const write = (messages: OutboxMessage[]) => enqueueLanes(db.pool, messages);
const outbox = createOutbox({ engine: 'lanes' });
const count = async (sql: string) => Number((await db.pool.query<{ n: string }>(sql)).rows[0]!.n);

/**
 * A lane dispatcher on a recording executor, woken by LISTEN only (no poll in the test's time):
 * `since()` is what it ran after the last `mark()`.
 */
function named(
  options: {
    backoff?: { baseMs: number; maxMs: number; jitterMs: number };
    wakeSource?: WakeSource;
  } = {},
) {
  const { executor: recording, calls } = recordingExecutor(fromPg(db.pool));
  /** `afterHintRead`: run once, after the next read by id returned and before it is seen. */
  const hooks: { afterHintRead?: () => Promise<void> } = {};
  const executor: SqlExecutor = {
    query: async <Row>(text: string, values?: readonly unknown[], queryOptions?: object) => {
      const result = await recording.query<Row>(text, values, queryOptions);
      const hook = hooks.afterHintRead;
      if (hook && isHintRead(text)) {
        hooks.afterHintRead = undefined;
        await hook();
      }
      return result;
    },
  };
  let from = 0;
  return {
    hooks,
    mark: () => void (from = calls.length),
    since: () => calls.slice(from).map((call) => call.text),
    /** Each statement since the mark with when it started and ended. */
    timed: () => calls.slice(from),
    start: (publisher: Publisher) => {
      const dispatcher = createLaneDispatcher({
        executor,
        publisher,
        pollIntervalMs: 60_000,
        wakeSource: listenWakeSource(db.url),
        ...options,
      });
      dispatcher.start();
      return dispatcher;
    },
  };
}

/** Idle, armed, and past its short looks: what it does next is what a NOTIFY makes it do. */
async function settled(dispatcher: ReturnType<typeof createLaneDispatcher>) {
  await armed(db.pool);
  await dispatcher.onIdle();
  await new Promise((resolve) => setTimeout(resolve, 300));
}

/** `n` published, and still `n` a moment later: what a read by id published, no read repeats. */
async function publishedOnce(dispatcher: ReturnType<typeof createLaneDispatcher>, n: number) {
  await expect.poll(() => dispatcher.stats().published, { timeout: 10_000 }).toBe(n);
  await new Promise((resolve) => setTimeout(resolve, 300));
  expect(dispatcher.stats().published).toBe(n);
}

/** The cursors pass every message, and `prefix-0`…`prefix-(n-1)` went out once each. */
async function passedOnce(published: OutgoingMessage[], prefix: string, n: number) {
  await expect
    .poll(
      () =>
        count(`SELECT count(*) AS n FROM outbox_lane_messages m JOIN outbox_lanes l
                 ON l.lane = m.lane WHERE m.id > l.cursor`),
      { timeout: 10_000 },
    )
    .toBe(0);
  expect(published.map((m) => m.aggregateId).sort()).toEqual(
    Array.from({ length: n }, (_, i) => `${prefix}-${i}`).sort(),
  );
}

const isLaneRead = (s: string) => s.includes('outbox_lane_next(');
const isHintRead = (s: string) => s.includes('outbox_lane_by_ids(');

describe('lanes engine: messages named by the wake-up', () => {
  it('an idle dispatcher publishes the messages its NOTIFY names without reading its lanes first, the first of an aggregate and the next', async () => {
    const run = named();
    let before: string[] | undefined;
    const seen: number[] = [];
    const dispatcher = run.start({
      publish: async (messages) => {
        if (messages.some((m) => m.aggregateId === 'hinted')) before ??= run.since();
        seen.push(...messages.map((m) => m.sequence));
        return messages.map(() => ({ status: 'published' as const }));
      },
    });
    try {
      await settled(dispatcher);
      run.mark();
      await write([{ topic: 'mail.send', aggregateId: 'hinted', payload: {} }]);
      await expect.poll(() => before !== undefined, { timeout: 10_000 }).toBe(true);
      // Between the write and the publish: the read by id, and no read of the lanes.
      expect(before!.filter(isHintRead)).toHaveLength(1);
      expect(before!.filter(isLaneRead)).toEqual([]);
      // The lane read that follows skips it: published once.
      await publishedOnce(dispatcher, 1);

      // Its aggregate's next message: this dispatcher published the one before, so it has
      // nothing before it either, and goes out the same way.
      await settled(dispatcher);
      before = undefined;
      run.mark();
      await write([{ topic: 'mail.send', aggregateId: 'hinted', payload: { n: 2 } }]);
      await expect.poll(() => before !== undefined, { timeout: 10_000 }).toBe(true);
      expect(before!.filter(isHintRead)).toHaveLength(1);
      expect(before!.filter(isLaneRead)).toEqual([]);
      await expect.poll(() => dispatcher.stats().published, { timeout: 10_000 }).toBe(2);
    } finally {
      await dispatcher.stop();
    }
    expect(seen).toEqual([1, 2]);
    // Its cursor passed it (given back at the stop): nothing left behind.
    expect(
      await count(`SELECT count(*) AS n FROM outbox_lane_messages m JOIN outbox_lanes l
                     ON l.lane = m.lane WHERE m.id > l.cursor`),
    ).toBe(0);
  });

  it('a named message that fails is parked, and its aggregate’s next message waits behind it (G4)', async () => {
    // No poll while the fast path is looked at; the retry is woken by hand below.
    const run = named({ backoff: { baseMs: 300, maxMs: 300, jitterMs: 0 } });
    const attempts: OutgoingMessage[] = [];
    const published: OutgoingMessage[] = [];
    let failFirst = true;
    let firstAttemptAfter: string[] | undefined;
    const dispatcher = run.start({
      publish: async (messages) =>
        messages.map((m) => {
          attempts.push(m);
          if (m.aggregateId === 'order' && m.sequence === 1 && failFirst) {
            failFirst = false;
            firstAttemptAfter = run.since();
            return { status: 'retryable' as const, error: 'destination said no' };
          }
          published.push(m);
          return { status: 'published' as const };
        }),
    });
    try {
      await settled(dispatcher);
      run.mark();
      await write([{ topic: 'payment.charge', aggregateId: 'order', payload: { n: 1 } }]);
      await expect.poll(() => firstAttemptAfter !== undefined, { timeout: 10_000 }).toBe(true);
      // The failed attempt came from the read by id (the fast path is what is tested here).
      expect(firstAttemptAfter!.filter(isLaneRead)).toEqual([]);
      await write([{ topic: 'payment.charge', aggregateId: 'order', payload: { n: 2 } }]);
      const poll = setInterval(() => dispatcher.wake(), 100);
      await expect
        .poll(() => published.filter((m) => m.aggregateId === 'order').length, {
          timeout: 15_000,
        })
        .toBe(2)
        .finally(() => clearInterval(poll));
    } finally {
      await dispatcher.stop();
    }
    const order = attempts.filter((m) => m.aggregateId === 'order').map((m) => m.sequence);
    // 1 failed, then 1 again, then 2: never 2 before 1 went out.
    expect(order).toEqual([1, 1, 2]);
    expect(published.map((m) => m.sequence)).toEqual([1, 2]);
    expect(await count('SELECT count(*) AS n FROM outbox_lane_parked')).toBe(0);
  });

  it('a NOTIFY that comes after the lane read published its message publishes nothing again', async () => {
    const published: OutgoingMessage[] = [];
    const dispatcher = named().start({
      publish: async (messages) => {
        published.push(...messages);
        return messages.map(() => ({ status: 'published' as const }));
      },
    });
    try {
      await settled(dispatcher);
      const [written] = await write([{ topic: 'mail.send', aggregateId: 'late', payload: {} }]);
      await expect.poll(() => published.length, { timeout: 10_000 }).toBe(1);
      await settled(dispatcher);
      // The same message named again, as a NOTIFY delivered late would.
      const { rows } = await db.pool.query<{ lane: number }>(
        'SELECT lane FROM outbox_lane_messages WHERE id = $1',
        [written!.id],
      );
      await db.pool.query('SELECT pg_notify($1, $2)', [
        notifyChannel('public'),
        `${rows[0]!.lane}:${written!.id}`,
      ]);
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(published.map((m) => m.aggregateId)).toEqual(['late']);
    } finally {
      await dispatcher.stop();
    }
  });

  it('reads again by id what a wake-up named before it was visible, instead of reading its lanes', async () => {
    // The WAL (CDC wake-ups) can name a commit a moment before the committing session leaves
    // the running transactions: the first read by id misses it. Here the name comes while the
    // writer's transaction is open, which commits right after that first read. A wake source
    // that only names, as the CDC one: no waiter row, so the writer sends no NOTIFY of its own.
    let wake: (hint?: string) => void = () => undefined;
    const run = named({
      wakeSource: {
        start: async (w) => void (wake = w),
        stop: async () => undefined,
      },
    });
    let before: string[] | undefined;
    const dispatcher = run.start({
      publish: async (messages) => {
        if (messages.some((m) => m.aggregateId === 'unseen')) before ??= run.since();
        return messages.map(() => ({ status: 'published' as const }));
      },
    });
    const client = await db.pool.connect();
    try {
      await dispatcher.onIdle();
      await new Promise((resolve) => setTimeout(resolve, 300));
      await client.query('BEGIN');
      const [written] = await outbox.enqueue(fromPg(client), [
        { topic: 'mail.send', aggregateId: 'unseen', payload: {} },
      ]);
      const { rows } = await client.query<{ lane: number }>(
        'SELECT lane FROM outbox_lane_messages WHERE id = $1',
        [written!.id],
      );
      run.mark();
      const committed = new Promise<void>((resolve) => {
        run.hooks.afterHintRead = async () => {
          await client.query('COMMIT');
          resolve();
        };
      });
      wake(`${rows[0]!.lane}:${written!.id}`);
      await committed;
      await expect.poll(() => before !== undefined, { timeout: 10_000 }).toBe(true);
      // The miss, the read again that found it, and no lane read between.
      expect(before!.filter(isHintRead)).toHaveLength(2);
      expect(before!.filter(isLaneRead)).toEqual([]);
      await publishedOnce(dispatcher, 1);
    } finally {
      client.release();
      await dispatcher.stop();
    }
  });

  it('what a NOTIFY names while the dispatcher is busy goes out right after, read by id, before the next lane read', async () => {
    const run = named();
    let release: (() => void) | undefined;
    let before: string[] | undefined;
    const dispatcher = run.start({
      publish: async (messages) => {
        if (messages.some((m) => m.aggregateId === 'slow'))
          await new Promise<void>((resolve) => (release = resolve));
        if (messages.some((m) => m.aggregateId === 'named')) before ??= run.since();
        return messages.map(() => ({ status: 'published' as const }));
      },
    });
    try {
      await settled(dispatcher);
      await write([{ topic: 'mail.send', aggregateId: 'slow', payload: {} }]);
      await expect.poll(() => release !== undefined, { timeout: 10_000 }).toBe(true);
      // Busy publishing 'slow': the NOTIFY of this one finds it busy.
      run.mark();
      await write([{ topic: 'mail.send', aggregateId: 'named', payload: {} }]);
      await new Promise((resolve) => setTimeout(resolve, 200));
      release!();
      await expect.poll(() => before !== undefined, { timeout: 10_000 }).toBe(true);
      expect(before!.filter(isHintRead)).toHaveLength(1);
      expect(before!.filter(isLaneRead)).toEqual([]);
      await publishedOnce(dispatcher, 2);
    } finally {
      release?.();
      await dispatcher.stop();
    }
  });

  it('what a NOTIFY names during a slow publish by id goes out beside it, not after it; its aggregate’s next waits for it (G4)', async () => {
    const run = named();
    const releases: (() => void)[] = [];
    const started: string[] = [];
    const ended: string[] = [];
    const dispatcher = run.start({
      publish: async (messages) => {
        const names = messages.map((m) => `${m.aggregateId}/${m.sequence}`);
        started.push(...names);
        if (messages.some((m) => m.aggregateId === 'slow'))
          await new Promise<void>((resolve) => releases.push(resolve));
        ended.push(...names);
        return messages.map(() => ({ status: 'published' as const }));
      },
    });
    try {
      await settled(dispatcher);
      run.mark();
      await write([{ topic: 'mail.send', aggregateId: 'slow', payload: {} }]);
      await expect.poll(() => releases.length, { timeout: 10_000 }).toBe(1);
      // Asleep, one publish by id in flight: another aggregate's message and slow's next.
      await write([{ topic: 'mail.send', aggregateId: 'fast', payload: {} }]);
      await write([{ topic: 'mail.send', aggregateId: 'slow', payload: { n: 2 } }]);
      // 'fast' goes out while 'slow' is still being published (one at a time: only after it).
      await expect.poll(() => ended, { timeout: 5_000 }).toContain('fast/1');
      expect(ended).not.toContain('slow/1');
      expect(run.since().filter(isLaneRead)).toEqual([]);
      // slow/2 has its aggregate's previous one in flight: not published beside it.
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(started).not.toContain('slow/2');
      releases[0]!();
      await expect.poll(() => started, { timeout: 10_000 }).toContain('slow/2');
      releases[1]?.();
      await expect.poll(() => ended, { timeout: 10_000 }).toContain('slow/2');
      expect(started.filter((n) => n.startsWith('slow/'))).toEqual(['slow/1', 'slow/2']);
      expect(ended.indexOf('slow/1')).toBeLessThan(started.indexOf('slow/2'));
      await publishedOnce(dispatcher, 3);
    } finally {
      for (const release of releases) release();
      await dispatcher.stop();
    }
  });

  it('a trickle of named messages goes out by id without a lane read after each; the deferred read then moves the cursors past them', async () => {
    const run = named();
    const published: OutgoingMessage[] = [];
    let onPublish = () => undefined as void;
    const dispatcher = run.start({
      publish: async (messages) => {
        published.push(...messages);
        onPublish();
        return messages.map(() => ({ status: 'published' as const }));
      },
    });
    const N = 20;
    try {
      await settled(dispatcher);
      run.mark();
      // One at a time, each once the last went out: each finds the dispatcher asleep.
      for (let i = 0; i < N; i++) {
        const out = new Promise<void>((resolve) => (onPublish = resolve));
        await write([{ topic: 'mail.send', aggregateId: `trickle-${i}`, payload: { i } }]);
        await out;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      // Read by id (all but one or two that a lane read running just then found first).
      const timed = run.timed();
      const hints = timed.filter((s) => isHintRead(s.text));
      expect(hints.length).toBeGreaterThanOrEqual(N - 4);
      // The lane read that followed each at once (woken with it, waiting for it to end) now
      // runs HINTED_CATCH_UP_MS (100 ms) later: few hint reads have a lane read starting within
      // 3 ms of their end, only those the horizon's own short sleeps happen to bring then (a
      // busy server keeps those going; they are what the lane reads there mostly are).
      const followed = hints.filter((h) =>
        timed.some((s) => isLaneRead(s.text) && s.start >= h.end! && s.start - h.end! <= 3),
      );
      expect(
        followed.length,
        `${followed.length} of ${hints.length} hint reads followed at once`,
      ).toBeLessThan(hints.length / 2);
      // The deferred read comes, the cursors pass all of them, and each went out once.
      await passedOnce(published, 'trickle', N);
    } finally {
      await dispatcher.stop();
    }
  });

  it('writers whose transactions overlap its reads: once those begun before the arming are gone, no short looks, only the deferred reads', async () => {
    const run = named();
    const published: OutgoingMessage[] = [];
    const dispatcher = run.start({
      publish: async (messages) => {
        published.push(...messages);
        return messages.map(() => ({ status: 'published' as const }));
      },
    });
    const N = 60;
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    try {
      await settled(dispatcher);
      run.mark();
      // Two writers, each holding its transaction open 8 ms after its INSERT: an id taken and
      // not final is nearly always there (the horizon's pair pending), as at a steady rate.
      const writer = async (from: number) => {
        const client = await db.pool.connect();
        try {
          for (let i = from; i < N; i += 2) {
            await client.query('BEGIN');
            await outbox.enqueue(fromPg(client), [
              { topic: 'mail.send', aggregateId: `overlap-${i}`, payload: { i } },
            ]);
            await sleep(8);
            await client.query('COMMIT');
            await sleep(2);
          }
        } finally {
          client.release();
        }
      };
      const started = performance.now();
      await Promise.all([writer(0), sleep(4).then(() => writer(1))]);
      const seconds = (performance.now() - started) / 1000;
      await expect.poll(() => published.length, { timeout: 10_000 }).toBe(N);
      const reads = run.since().filter(isLaneRead).length;
      // The deferred read every 100 ms and a few looks after the arming; with a look every 1, 2
      // or 4 ms while the horizon is unsettled (before), a read for about every message.
      expect(
        reads,
        `${reads} lane reads for ${N} messages in ${seconds.toFixed(2)} s`,
      ).toBeLessThan(Math.ceil(seconds * 10) + 10);
      expect(run.since().filter(isHintRead).length).toBeGreaterThan(N / 2);
      await passedOnce(published, 'overlap', N);
    } finally {
      await dispatcher.stop();
    }
  });
});
