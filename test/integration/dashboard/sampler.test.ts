import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDispatcher, fromPg, type Publisher } from '../../../src/index.js';
import { DashboardSampler } from '../../../src/dashboard/sampler.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted } from '../../helpers/outbox-fixtures.js';

/**
 * The published-rate chart counts a settle that was in flight while a sample was taken. A settle
 * stamps `dispatched_at` with its transaction's start and commits later; the sampler used to
 * count windows ending at now(), so such a settle fell between two samples (the dashboard's e2e
 * test saw 0 of 25 once in CI). Here the settle is held in flight on purpose: a second
 * transaction locks the claimed row, so the settle's DELETE waits, a sample is taken, then the
 * lock goes and the next sample must count the message.
 */
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

/** Messages the samples after the first counted (rate × interval, as the page draws them). */
function counted(sampler: DashboardSampler, after: number): number {
  const samples = sampler.samples();
  let sum = 0;
  samples.forEach((p, i) => {
    const before = samples[i - 1];
    if (!before || p.at <= after) return;
    sum += Math.round(((p.publishedPerSecond ?? 0) * (p.at - before.at)) / 1000);
  });
  return sum;
}

describe('DashboardSampler', () => {
  it('counts a settle that straddles a sample once, in a later sample', async () => {
    const sampler = new DashboardSampler({
      executor: fromPg(db.pool),
      schema: 'public',
      intervalMs: 200,
    });
    await sampler.sample();
    const start = sampler.samples().at(-1)!.at;

    const [message] = await enqueueCommitted(db.pool, [
      { topic: 'mail.send', aggregateId: 'straddle', payload: {} },
    ]);
    const id = message!.id;
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    try {
      // Publish, then lock the row before the settle runs: the settle waits for the lock.
      const publisher: Publisher = {
        publish: async (messages) => {
          await locker.query('BEGIN');
          await locker.query('SELECT 1 FROM outbox WHERE id = $1 FOR UPDATE', [id]);
          return messages.map(() => ({ status: 'published' as const }));
        },
      };
      const drained = createDispatcher({
        executor: fromPg(db.pool),
        publisher,
        unorderedTopics: ['*'],
      }).drain();
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
      // The settle's transaction began before this sample and has not committed.
      await sampler.sample();
      expect(counted(sampler, start)).toBe(0);
      await locker.query('COMMIT');
      expect((await drained).published).toBe(1);
    } finally {
      await locker.end();
    }
    await sampler.sample();
    await sampler.sample();
    expect(counted(sampler, start)).toBe(1);
    const times = sampler.samples().map((p) => p.at);
    expect([...times].sort((a, b) => a - b)).toEqual(times);
  });
});
