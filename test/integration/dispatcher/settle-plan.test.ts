import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg, PgOutboxStore, type SqlExecutor } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';

/**
 * The settle must reach its rows through the primary key whatever the outbox holds. Its first
 * shape (a join with jsonb_to_recordset, filtered by lease owner) was planned as a sequential scan
 * of the whole outbox on tables up to ~100k rows, analyzed or not, so every settle read every row
 * (sql/settle.ts). This reads the plan Postgres makes for the statement the store really sends.
 * (On a table of one page a sequential scan IS the cheapest path, and the settle is planned per
 * call, so tiny tables are not checked.)
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  Plans?: PlanNode[];
}

const nodes = (plan: PlanNode): PlanNode[] => [plan, ...(plan.Plans ?? []).flatMap(nodes)];

describe('settle plan', () => {
  it.each([2_000, 10_000])(
    'with %i rows in the outbox, the settle uses outbox_pkey, not a sequential scan',
    async (rows) => {
      await db.pool.query('TRUNCATE outbox, outbox_aggregates');
      await db.pool.query(
        `INSERT INTO outbox (aggregate_id, topic, payload)
         SELECT 'agg-' || g, 'mail.send', '{}'::jsonb FROM generate_series(1, $1::int) g`,
        [rows],
      );
      await db.pool.query('ANALYZE outbox');
      const sent: { text: string; values: readonly unknown[] }[] = [];
      const executor = fromPg(db.pool);
      const recording: SqlExecutor = {
        query: (text, values) => {
          sent.push({ text, values: values ?? [] });
          return executor.query(text, values);
        },
      };
      const store = new PgOutboxStore(recording);
      const claimed = await store.claim({
        owner: 'settle-plan-test',
        batchSize: 3,
        unorderedPatterns: [],
        deadLettersBlock: false,
        leaseMs: 30_000,
      });
      expect(claimed).toHaveLength(3);
      const settled = await store.settle(
        'settle-plan-test',
        claimed.map((m) => ({ rowId: m.rowId, kind: 'published' as const })),
      );
      expect(settled.sort()).toEqual(claimed.map((m) => m.rowId).sort());

      const settle = sent.at(-1)!;
      expect(settle.text).toMatch(/SET dispatched_at/);
      const { rows: plan } = await db.pool.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
        `EXPLAIN (FORMAT JSON) ${settle.text}`,
        [...settle.values],
      );
      const scans = nodes(plan[0]!['QUERY PLAN'][0].Plan).filter(
        (n) => n['Relation Name'] === 'outbox',
      );
      expect(scans.map((n) => n['Node Type'])).not.toContain('Seq Scan');
      expect(scans.length).toBeGreaterThan(0);
    },
  );
});
