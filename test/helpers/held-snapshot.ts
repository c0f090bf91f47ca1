import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { createDispatcher, fromPg, type Publisher } from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from './database.js';
import type { PlanNode } from './explain.js';

/**
 * A REPEATABLE READ snapshot held open on its own connection (issue 25: a report, `pg_dump`, a
 * standby's feedback): taken before anything is written, it keeps every row version that dies
 * after it from vacuum. `release()` ends it and closes the connection.
 */
export async function holdSnapshot(url: string): Promise<{ release(): Promise<void> }> {
  const holder = new pg.Client({ connectionString: url });
  await holder.connect();
  await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
  await holder.query('SELECT count(*) FROM outbox');
  return {
    async release() {
      await holder.query('ROLLBACK').catch(() => undefined);
      await holder.end();
    },
  };
}

/** Shared buffers a plan touched (hit and read). */
export const blocksOf = (plan: PlanNode) =>
  (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0);

/** A publisher that publishes everything at once and does nothing. */
export const noopPublisher: Publisher = {
  publish: async (m) => m.map(() => ({ status: 'published' as const })),
};

/**
 * A test database with a REPEATABLE READ snapshot held open on it for the whole file (taken
 * before anything is written): registers the beforeAll/afterAll that make and drop both.
 * `current()` is the database once beforeAll ran.
 */
export function useHeldSnapshotDatabase(): { current(): TestDatabase } {
  let db: TestDatabase | undefined;
  let holder: Awaited<ReturnType<typeof holdSnapshot>> | undefined;
  beforeAll(async () => {
    db = await createTestDatabase();
    holder = await holdSnapshot(db.url);
  }, 120_000);
  afterAll(async () => {
    await holder?.release();
    await db?.drop();
  });
  return {
    current: () => {
      if (!db) throw new Error('the held-snapshot database is made in beforeAll');
      return db;
    },
  };
}

/** Writes `count` messages through the insert trigger: one per aggregate, or all on `aggregate`. */
export async function insertMessages(pool: pg.Pool, count: number, aggregate?: string) {
  await pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload)
     SELECT coalesce($2, 'a-' || g || '-' || random()), 'payment.charge', '{}'::jsonb
     FROM generate_series(1, $1::int) g`,
    [count, aggregate ?? null],
  );
}

/** Publishes everything due with a no-op publisher; returns how many went out. */
export async function drainNoop(pool: pg.Pool, batchSize = 200): Promise<number> {
  const dispatcher = createDispatcher({
    executor: fromPg(pool),
    publisher: noopPublisher,
    batchSize,
  });
  return (await dispatcher.drain()).published;
}
