import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDispatcher, fromPg } from '../../../src/index.js';
import { nextDueSql } from '../../../src/sql/fleet.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { explainAnalyze } from '../../helpers/explain.js';
import { blocksOf, holdSnapshot, noopPublisher } from '../../helpers/held-snapshot.js';

/**
 * Fleet mode asks an idle tenant when its next message becomes due (`nextDueSql`) instead of
 * polling it. That read must not grow with what was dispatched while a REPEATABLE READ snapshot is
 * held open (the dead index entries vacuum cannot take): its buffers are counted with
 * EXPLAIN (ANALYZE, BUFFERS) after 10,000 and after 40,000 dispatched under the snapshot, with one
 * message backing off so the read has a row to find.
 */
let db: TestDatabase;
let holder: Awaited<ReturnType<typeof holdSnapshot>> | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
  holder = await holdSnapshot(db.url);
}, 120_000);
afterAll(async () => {
  await holder?.release();
  await db?.drop();
});

async function insert(count: number) {
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload)
     SELECT 'a-' || g || '-' || random(), 'payment.charge', '{}'::jsonb
     FROM generate_series(1, $1::int) g`,
    [count],
  );
}

async function drain(): Promise<number> {
  const dispatcher = createDispatcher({
    executor: fromPg(db.pool),
    publisher: noopPublisher,
    batchSize: 500,
  });
  return (await dispatcher.drain()).published;
}

/** The read, explained, with one message due in about a minute (a retry's backoff). */
async function explainNextDue() {
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload, available_at)
     VALUES ('later', 'payment.charge', '{}', now() + interval '1 minute')`,
  );
  const client = await db.pool.connect();
  try {
    const plan = await explainAnalyze(client, nextDueSql('public'), []);
    const { rows } = await client.query<{ inMs: number }>(nextDueSql('public'));
    return { blocks: blocksOf(plan), inMs: rows[0]!.inMs };
  } finally {
    client.release();
    await db.pool.query(`DELETE FROM outbox WHERE aggregate_id = 'later'`);
  }
}

describe('fleet: when an idle tenant is next due, under a held REPEATABLE READ snapshot', () => {
  it('reads the same buffers after 10,000 and after 40,000 dispatched', async () => {
    const at: Record<number, { blocks: number; inMs: number }> = {};
    for (const total of [10_000, 40_000]) {
      await insert(total - (at[10_000] ? 10_000 : 0));
      expect(await drain()).toBe(total - (at[10_000] ? 10_000 : 0));
      at[total] = await explainNextDue();
    }
    const why = JSON.stringify(at);
    console.log(`fleet next-due read under the held snapshot: ${why}`);
    for (const total of [10_000, 40_000]) {
      expect(at[total]!.inMs, why).toBeGreaterThan(30_000);
      expect(at[total]!.inMs, why).toBeLessThanOrEqual(60_000);
    }
    expect(at[40_000]!.blocks, why).toBeLessThan(at[10_000]!.blocks * 1.5 + 50);
  }, 300_000);
});
