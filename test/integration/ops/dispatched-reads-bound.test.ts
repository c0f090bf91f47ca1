import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDispatcher, fromPg } from '../../../src/index.js';
import { candidateStatesSql } from '../../../src/sql/cdc.js';
import { dispatchedSinceSql } from '../../../src/sql/dashboard.js';
import { ringTables } from '../../../src/sql/dispatched-log.js';
import { messagesStatusSql } from '../../../src/sql/effect-status.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { explainAnalyze } from '../../helpers/explain.js';
import { blocksOf, holdSnapshot, noopPublisher } from '../../helpers/held-snapshot.js';

/**
 * Issue 25, item 4: what reads dispatched messages after migration 018 reads them in the ring
 * `outbox_dispatched_0..2` (through the view `outbox_messages`). Three readers run often and must
 * not grow with what the ring holds: effect status (every agent turn, by message id), the CDC
 * dispatcher's "was this candidate settled by someone else?" probe (by row id), and the
 * dashboard's published-rate sample (by `dispatched_at`, through the BRIN index). Each is
 * explained (ANALYZE, BUFFERS) after 5,000 and after 25,000 messages were dispatched under a held
 * REPEATABLE READ snapshot, beside 300,000 older dispatched rows, and must read about the same at
 * both depths. A control reads the effect status without its indexes, to show the bound can fail.
 */
let db: TestDatabase;
let holder: Awaited<ReturnType<typeof holdSnapshot>> | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
  // History that was dispatched an hour ago, before the snapshot: what a ring holds after a day.
  await db.pool.query(
    `INSERT INTO outbox_dispatched_0 (id, message_id, aggregate_id, topic, payload, headers,
                                      sequence, created_at, available_at, dispatched_at,
                                      attempts, shadow, ordered, ready)
     SELECT -g, gen_random_uuid(), 'old-' || (g % 1000), 'payment.charge', '{}'::jsonb,
            '{}'::jsonb, g, now() - interval '61 minutes', now() - interval '61 minutes',
            now() - interval '1 hour' + g * interval '1 microsecond', 1, false, true, false
     FROM generate_series(1, 300000) g`,
  );
  await db.pool.query('VACUUM ANALYZE outbox_dispatched_0');
  holder = await holdSnapshot(db.url);
}, 180_000);
afterAll(async () => {
  await holder?.release();
  await db?.drop();
});

/** Inserts `count` messages on 100 aggregates and drains them all; returns their ids. */
async function insertAndDrain(count: number) {
  const { rows } = await db.pool.query<{ id: string; message_id: string }>(
    `INSERT INTO outbox (aggregate_id, topic, payload)
     SELECT 'a-' || (g % 100), 'payment.charge', '{}'::jsonb FROM generate_series(1, $1::int) g
     RETURNING id::text, message_id::text`,
    [count],
  );
  const dispatcher = createDispatcher({
    executor: fromPg(db.pool),
    publisher: noopPublisher,
    batchSize: 200,
  });
  expect((await dispatcher.drain()).published).toBe(count);
  return rows;
}

/** Buffers (and the figures it returned) of each reader, for messages just dispatched. */
async function measure() {
  // Autovacuum summarizes filled BRIN ranges in the background; a test cannot wait for it, so it
  // does the same here: what a reader meets on a ring that autovacuum keeps up with.
  for (const table of ringTables('public')) {
    await db.pool.query(`SELECT brin_summarize_new_values($1::regclass)`, [
      `${table}_dispatched_at_idx`,
    ]);
  }
  const since = (await db.pool.query<{ at: Date }>(`SELECT now() AS at`)).rows[0]!.at;
  const recent = await insertAndDrain(100);
  const client = await db.pool.connect();
  try {
    const statusArgs = [recent.slice(0, 10).map((r) => r.message_id), null];
    const status = await client.query<{ dispatchedAt: Date | null }>(
      messagesStatusSql('public'),
      statusArgs,
    );
    expect(status.rows).toHaveLength(10);
    expect(status.rows.every((r) => r.dispatchedAt !== null)).toBe(true);
    const candidateArgs = [recent.map((r) => r.id)];
    const states = await client.query<{ state: string }>(
      candidateStatesSql('public'),
      candidateArgs,
    );
    expect(new Set(states.rows.map((r) => r.state))).toEqual(new Set(['done']));
    const rate = await client.query<{ n: number }>(dispatchedSinceSql('public'), [since]);
    expect(rate.rows[0]!.n).toBeGreaterThanOrEqual(100);

    const effectStatus = blocksOf(
      await explainAnalyze(client, messagesStatusSql('public'), statusArgs),
    );
    const cdc = blocksOf(await explainAnalyze(client, candidateStatesSql('public'), candidateArgs));
    // The rate sample reads the last few seconds through the BRIN index. The planner's estimate
    // of that window comes from the histogram of `dispatched_at`, which cannot tell a few seconds
    // from the thousands dispatched within one of its buckets: on these small tables it prefers a
    // sequential scan (cheaper for it; with a million rows over an hour it picks the BRIN itself,
    // 9 buffers, measured in psql). What is bounded here is the index path.
    await client.query('SET enable_seqscan = off');
    const rateSample = blocksOf(
      await explainAnalyze(client, dispatchedSinceSql('public'), [since]),
    );
    await client.query('RESET enable_seqscan');
    return { effectStatus, cdc, rateSample };
  } finally {
    client.release();
  }
}

describe('readers of dispatched messages under a held snapshot', () => {
  it('effect status, the CDC probe and the rate sample read the same after 5,000 and 25,000 dispatched', async () => {
    await insertAndDrain(5_000);
    const shallow = await measure();
    await insertAndDrain(20_000);
    const deep = await measure();
    const why = JSON.stringify({ shallow, deep });
    console.log(`buffers read by the readers of the ring: ${why}`);
    for (const key of ['effectStatus', 'cdc', 'rateSample'] as const) {
      expect(deep[key], `${key} ${why}`).toBeLessThan(shallow[key] * 1.5 + 50);
      expect(deep[key], `${key} ${why}`).toBeLessThan(2_000);
    }

    // Control: the same effect status without the ring's message_id indexes scans the ring.
    const client = await db.pool.connect();
    try {
      const { rows } = await client.query<{ message_id: string }>(
        `SELECT m.message_id::text FROM outbox_messages m ORDER BY m.id DESC LIMIT 10`,
      );
      await client.query('SET enable_indexscan = off');
      await client.query('SET enable_bitmapscan = off');
      const unindexed = blocksOf(
        await explainAnalyze(client, messagesStatusSql('public'), [
          rows.map((r) => r.message_id),
          null,
        ]),
      );
      await client.query('RESET enable_indexscan');
      await client.query('RESET enable_bitmapscan');
      expect(unindexed, JSON.stringify({ unindexed, deep })).toBeGreaterThan(deep.effectStatus * 5);
    } finally {
      client.release();
    }
  }, 600_000);
});
