import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LaneDashboardSampler } from '../../../src/dashboard/lane-sampler.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import type { Publisher } from '../../../src/publishers/publisher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes, lanesPending } from '../../helpers/lanes.js';

/**
 * The dashboard's published rate on the lanes engine, which stamps nothing per published message:
 * the sampler counts what each lane cursor passed since the previous sample, less what parked,
 * plus the parked rows that left. Every published message is counted once, whatever the samples
 * fall on: a cursor write in flight during a sample, retries that park and go out later.
 */
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});
afterEach(async () => {
  await db.pool.query(
    'TRUNCATE outbox_lane_messages, outbox_lane_parked; UPDATE outbox_lanes SET cursor = 0, owner = NULL, lease_expires_at = NULL',
  );
});
afterAll(async () => {
  await db?.drop();
});

const mails = (n: number, prefix: string) =>
  Array.from({ length: n }, (_, i) => ({
    topic: 'mail.send',
    aggregateId: `${prefix}-${i % 50}`,
    payload: { i },
  }));

/** Messages the samples after the first counted (rate × interval, as the page draws them). */
function counted(sampler: LaneDashboardSampler): number {
  const samples = sampler.samples();
  let sum = 0;
  samples.forEach((p, i) => {
    const before = samples[i - 1];
    if (!before) return;
    sum += ((p.publishedPerSecond ?? 0) * (p.at - before.at)) / 1000;
  });
  return Math.round(sum);
}

const newSampler = (options: { idWindow?: number } = {}) =>
  new LaneDashboardSampler({
    executor: fromPg(db.pool),
    schema: 'public',
    intervalMs: 60_000,
    ...options,
  });

/** Samples every few ms until `work` ends, then twice more. */
async function sampledWhile(sampler: LaneDashboardSampler, work: Promise<unknown>) {
  let done = false;
  void work.finally(() => (done = true));
  while (!done) {
    await sampler.sample();
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  await work;
  await sampler.sample();
  await sampler.sample();
}

describe('LaneDashboardSampler', () => {
  it('counts every message of a drain once, sampled all through it', async () => {
    const sampler = newSampler();
    await sampler.sample();
    await enqueueLanes(db.pool, mails(3_000, 'drain'));
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: { publish: async (m) => m.map(() => ({ status: 'published' as const })) },
      batchSize: 100,
    });
    await sampledWhile(sampler, dispatcher.drain());
    expect(counted(sampler)).toBe(3_000);
    expect(sampler.samples().some((p) => p.publishedEstimated)).toBe(false);
    // The latency histogram has what the cursors passed (none of it shadow or parked).
    expect(sampler.latency().total).toBe(3_000);
  }, 60_000);

  it('puts what the cursors passed in the latency histogram by its age at the sample, parked rows not', async () => {
    const sampler = newSampler();
    await sampler.sample();
    await enqueueLanes(db.pool, mails(20, 'old'));
    await db.pool.query(
      `UPDATE outbox_lane_messages SET created_at = now() - interval '45 seconds'`,
    );
    await createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: {
        publish: async (messages) =>
          messages.map((m) =>
            (m.payload as { i: number }).i < 5
              ? { status: 'permanent' as const, error: 'refused' }
              : { status: 'published' as const },
          ),
      },
      deadLetterPolicy: 'skip',
    }).drain();
    await sampler.sample();
    const { edgesSeconds, counts, total } = sampler.latency();
    expect(total).toBe(15);
    // Created 45 s before the sample: the [30 s, 60 s) bucket (an upper bound of the latency).
    expect(counts[edgesSeconds.indexOf(30)]).toBe(15);
    expect(counted(sampler)).toBe(15);
  });

  it('counts a cursor write that straddles a sample once, in a later sample', async () => {
    const sampler = newSampler();
    await sampler.sample();
    await enqueueLanes(db.pool, mails(25, 'straddle'));
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    try {
      // Published; then the lane rows are locked before the cursors are written: the write waits.
      const publisher: Publisher = {
        publish: async (messages) => {
          await locker.query('BEGIN');
          await locker.query('SELECT 1 FROM outbox_lanes FOR UPDATE');
          return messages.map(() => ({ status: 'published' as const }));
        },
      };
      const drained = createLaneDispatcher({ executor: fromPg(db.pool), publisher }).drain();
      await expect
        .poll(
          async () =>
            (
              await db.pool.query<{ n: number }>(
                `SELECT count(*)::int AS n FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'`,
              )
            ).rows[0]!.n,
          { timeout: 10_000 },
        )
        .toBe(1);
      await sampler.sample();
      expect(counted(sampler)).toBe(0);
      await locker.query('COMMIT');
      expect((await drained).published).toBe(25);
    } finally {
      await locker.end();
    }
    await sampler.sample();
    await sampler.sample();
    expect(counted(sampler)).toBe(25);
    const times = sampler.samples().map((p) => p.at);
    expect([...times].sort((a, b) => a - b)).toEqual(times);
  }, 60_000);

  it('counts failures that park and go out later, and what waited behind them, once; dead letters not', async () => {
    const sampler = newSampler();
    await sampler.sample();
    await enqueueLanes(db.pool, mails(1_000, 'retry'));
    const failedOnce = new Set<string>();
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      // Every 10th message fails its first attempt; its aggregate's later messages park behind.
      // Every 100th from the 5th on is refused: a dead letter (skip: its aggregate goes on).
      publisher: {
        publish: async (messages) =>
          messages.map((m) => {
            const i = (m.payload as { i: number }).i;
            if (i % 100 === 5) return { status: 'permanent' as const, error: 'refused' };
            if (i % 10 === 0 && !failedOnce.has(m.id)) {
              failedOnce.add(m.id);
              return { status: 'retryable' as const, error: 'try again' };
            }
            return { status: 'published' as const };
          }),
      },
      batchSize: 100,
      backoff: { baseMs: 20, maxMs: 20, jitterMs: 0 },
      deadLetterPolicy: 'skip',
    });
    const work = (async () => {
      while ((await lanesPending(db.pool)) > 0) {
        await dispatcher.drain();
        await new Promise((resolve) => setTimeout(resolve, 30));
      }
    })();
    await sampledWhile(sampler, work);
    expect(failedOnce.size).toBe(100);
    const dead = await db.pool.query(
      'SELECT count(*)::int AS n FROM outbox_lane_parked WHERE dead_at IS NOT NULL',
    );
    expect(dead.rows[0].n).toBe(10);
    expect(counted(sampler)).toBe(990);
    expect(sampler.samples().some((p) => p.publishedEstimated)).toBe(false);
  }, 60_000);
});
