import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { pgPoolTransactions } from '../../../src/agent/transaction-runner.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { backfill } from '../../../src/retrofit/backfill.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { runOps } from '../../fixtures/ops/run-ops-cli.js';

const ORDERS = 2_500;
const UNSHIPPED = 2_000; // ids 1..2000 unshipped, 2001..2500 shipped

describe('outbox backfill', () => {
  let db: TestDatabase;
  let dir: string;
  const file = async (name: string, text: string) => {
    const path = join(dir, name);
    await writeFile(path, text);
    return path;
  };
  const outboxCount = async () =>
    (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM outbox')).rows[0]!.n;

  beforeAll(async () => {
    db = await createTestDatabase();
    dir = await mkdtemp(join(tmpdir(), 'outbox-backfill-'));
    await db.pool.query(`
      CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, shipped_at timestamptz);
      INSERT INTO orders
      SELECT g, 'customer-' || (g % 7), CASE WHEN g > ${UNSHIPPED} THEN now() END
      FROM generate_series(1, ${ORDERS}) g;`);
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
    await db.drop();
  });
  beforeEach(async () => {
    await db.pool.query('DELETE FROM outbox');
  });

  const unshipped = `-- orders that never got their shipping message
SELECT 'order:' || id AS aggregate_id,
       jsonb_build_object('orderId', id, 'customer', customer) AS payload,
       id AS ignored_extra_column
  FROM orders
 WHERE shipped_at IS NULL
 ORDER BY id;
`;

  it('--dry-run validates, counts and previews the rows, and writes nothing', async () => {
    const sql = await file('unshipped.sql', unshipped);
    const result = await runOps(
      ['backfill', '--sql', sql, '--topic', 'order.ship', '--dry-run', '--preview', '3'],
      { DATABASE_URL: db.url },
    );
    expect(result.stderr).not.toMatch(/error/i);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(
      `The query yields ${UNSHIPPED} valid rows: would enqueue ${UNSHIPPED} messages on "order.ship" in 4 transaction(s) of at most 500. Nothing was written.`,
    );
    expect(result.stdout).toContain('First 3:');
    expect(result.stdout).toContain('order:1  {"orderId":1,"customer":"customer-1"}');
    expect(result.stdout).toContain('order:3  {"orderId":3,"customer":"customer-3"}');
    expect(result.stderr).toMatch(/checked \d+ rows/);
    expect(await outboxCount()).toBe(0);
  });

  it('writes one message per row through the writer, each batch in its own transaction', async () => {
    const sql = await file('unshipped.sql', unshipped);
    const result = await runOps(
      ['backfill', '--sql', sql, '--topic', 'order.ship', '--batch-size', '300', '--json'],
      { DATABASE_URL: db.url },
    );
    expect(result.code).toBe(0);
    const summary = JSON.parse(result.stdout) as {
      written: number;
      batches: number;
      backfillId: string;
    };
    expect(summary).toMatchObject({ written: UNSHIPPED, batches: Math.ceil(UNSHIPPED / 300) });

    const { rows } = await db.pool.query<{
      n: number;
      transactions: number;
      topics: string[];
      tagged: number;
      first: unknown;
      sequences: number;
    }>(
      `SELECT count(*)::int AS n,
              count(DISTINCT xmin::text)::int AS transactions,
              array_agg(DISTINCT topic) AS topics,
              count(*) FILTER (WHERE headers->>'backfill_id' = $1)::int AS tagged,
              (array_agg(payload ORDER BY id))[1] AS first,
              count(*) FILTER (WHERE sequence = 1)::int AS sequences
         FROM outbox`,
      [summary.backfillId],
    );
    expect(rows[0]).toEqual({
      n: UNSHIPPED,
      // xmin is the inserting transaction: one per batch, none larger than the batch size.
      transactions: Math.ceil(UNSHIPPED / 300),
      topics: ['order.ship'],
      tagged: UNSHIPPED,
      first: { orderId: 1, customer: 'customer-1' },
      sequences: UNSHIPPED,
    });
    const sizes = await db.pool.query<{ size: number }>(
      'SELECT count(*)::int AS size FROM outbox GROUP BY xmin::text',
    );
    expect(Math.max(...sizes.rows.map((r) => r.size))).toBe(300);
    expect(result.stdout).not.toContain('shadow');
  });

  it('refuses, writing nothing, when the query yields more rows than --limit', async () => {
    const sql = await file('unshipped.sql', unshipped);
    const result = await runOps(
      ['backfill', '--sql', sql, '--topic', 'order.ship', '--limit', '1999'],
      {
        DATABASE_URL: db.url,
      },
    );
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/more than 1999 rows; nothing was written/);
    expect(await outboxCount()).toBe(0);
  });

  it('the default limit is 10000 rows', async () => {
    const source = await db.pool.connect();
    try {
      await expect(
        backfill({
          source: fromPg(source),
          transactions: pgPoolTransactions(db.pool),
          sql: `SELECT 'a' || g AS aggregate_id, '{}'::jsonb AS payload FROM generate_series(1, 10001) g`,
          topic: 't',
        }),
      ).rejects.toThrow(/more than 10000 rows/);
      const ok = await backfill({
        source: fromPg(source),
        transactions: pgPoolTransactions(db.pool),
        sql: `SELECT 'a' || g AS aggregate_id, '{}'::jsonb AS payload FROM generate_series(1, 10000) g`,
        topic: 't',
        dryRun: true,
      });
      expect(ok.rows).toBe(10_000);
    } finally {
      source.release();
    }
    expect(await outboxCount()).toBe(0);
  });

  it.each([
    [
      'a DELETE',
      `DELETE FROM orders WHERE id = 1 RETURNING 'x' AS aggregate_id, '{}'::jsonb AS payload`,
      /must be one SELECT statement/,
    ],
    [
      'a data-modifying CTE',
      `WITH d AS (DELETE FROM orders WHERE id = 1 RETURNING id) SELECT 'x' AS aggregate_id, '{}'::jsonb AS payload FROM d`,
      /must only read/,
    ],
    [
      'a second statement',
      `SELECT 'x' AS aggregate_id, '{}'::jsonb AS payload; DROP TABLE orders`,
      /must be one SELECT statement/,
    ],
    [
      'a function that writes',
      `SELECT 'x' || nextval('outbox_id_seq') AS aggregate_id, '{}'::jsonb AS payload`,
      /must only read/,
    ],
    [
      'wrong columns',
      `SELECT id, customer FROM orders`,
      /must yield the columns aggregate_id and payload/,
    ],
    [
      'a text payload',
      `SELECT 'x' AS aggregate_id, 'hello'::text AS payload`,
      /row 1\.payload: must be json or jsonb, got text/,
    ],
    [
      'a NULL aggregate id',
      `SELECT CASE WHEN id = 3 THEN NULL ELSE 'o' || id END AS aggregate_id, '{}'::jsonb AS payload FROM orders ORDER BY id`,
      /row 3\.aggregateId/,
    ],
  ])('refuses %s and changes nothing', async (_what, text, message) => {
    const sql = await file('bad.sql', text);
    const result = await runOps(['backfill', '--sql', sql, '--topic', 'order.ship'], {
      DATABASE_URL: db.url,
    });
    expect(result.stderr).toMatch(message);
    expect(result.code).toBe(1);
    expect(await outboxCount()).toBe(0);
    const orders = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM orders');
    expect(orders.rows[0]!.n).toBe(ORDERS);
  });

  it('--shadow writes shadow messages', async () => {
    const sql = await file(
      'few.sql',
      `SELECT 'order:' || id AS aggregate_id, to_jsonb(o) AS payload FROM orders o WHERE id <= 3`,
    );
    const result = await runOps(['backfill', '--sql', sql, '--topic', 'order.ship', '--shadow'], {
      DATABASE_URL: db.url,
    });
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(
      /Enqueued 3 messages on "order.ship" in 1 transaction\(s\); header backfill_id=/,
    );
    const { rows } = await db.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM outbox WHERE shadow',
    );
    expect(rows[0]!.n).toBe(3);
  });

  it("--engine lanes writes the lanes engine's messages, which a lane dispatcher publishes", async () => {
    const sql = await file(
      'few-lanes.sql',
      `SELECT 'order:' || id AS aggregate_id, jsonb_build_object('orderId', id) AS payload
         FROM orders WHERE id <= 4 ORDER BY id`,
    );
    const result = await runOps(
      ['backfill', '--sql', sql, '--topic', 'order.ship', '--engine', 'lanes', '--json'],
      { DATABASE_URL: db.url },
    );
    expect(result.code, result.stderr).toBe(0);
    const summary = JSON.parse(result.stdout) as { written: number; backfillId: string };
    expect(summary.written).toBe(4);
    expect(await outboxCount()).toBe(0);
    const { rows } = await db.pool.query<{ aggregate_id: string; sequence: string }>(
      `SELECT aggregate_id, sequence FROM outbox_lane_messages
        WHERE headers->>'backfill_id' = $1 AND topic = 'order.ship' ORDER BY id`,
      [summary.backfillId],
    );
    expect(rows.map((r) => r.aggregate_id)).toEqual(['order:1', 'order:2', 'order:3', 'order:4']);
    const publisher = new InMemoryPublisher();
    const drained = await createLaneDispatcher({ executor: fromPg(db.pool), publisher }).drain();
    expect(drained.published).toBe(4);
    expect(publisher.published.map((m) => m.payload)).toEqual(
      expect.arrayContaining([1, 2, 3, 4].map((orderId) => ({ orderId }))),
    );
  });

  it('flag mistakes are usage errors (exit 2)', async () => {
    const noTopic = await runOps(['backfill', '--sql', 'x.sql'], { DATABASE_URL: db.url });
    expect(noTopic.code).toBe(2);
    expect(noTopic.stderr).toMatch(/--topic is required/);
    const missing = await runOps(['backfill', '--sql', join(dir, 'nope.sql'), '--topic', 't'], {
      DATABASE_URL: db.url,
    });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/cannot read --sql/);
    const engine = await runOps(
      ['backfill', '--sql', join(dir, 'nope.sql'), '--topic', 't', '--engine', 'queues'],
      { DATABASE_URL: db.url },
    );
    expect(engine.code).toBe(2);
    expect(engine.stderr).toMatch(/--engine must be claims or lanes/);
  });
});
