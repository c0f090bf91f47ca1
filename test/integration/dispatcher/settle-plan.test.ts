import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg, PgOutboxStore, type SqlExecutor } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';

/**
 * The settle must reach its rows through the primary key whatever the outbox holds, and expand
 * its jsonb parameter once. Its first shape (a plain join with jsonb_to_recordset, filtered by
 * lease owner) was planned as a sequential scan of the whole outbox on tables up to ~100k rows,
 * so every settle read every row; a later attempt (`o.id = ANY(...)`) put the jsonb expansion
 * inside the loop, once per row (sql/settle.ts). This reads the plan Postgres runs for the
 * statement the store really sends. (On a table of one page a sequential scan IS the cheapest
 * path, and the settle is planned per call, so tiny tables are not checked.)
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
  'Function Name'?: string;
  'Actual Loops'?: number;
  Plans?: PlanNode[];
}

const nodes = (plan: PlanNode): PlanNode[] => [plan, ...(plan.Plans ?? []).flatMap(nodes)];

describe('settle plan', () => {
  it.each([
    [2_000, 3],
    [10_000, 3],
    [20_000, 200],
  ])(
    'with %i rows in the outbox and a batch of %i, the settle uses outbox_pkey and expands its records once',
    async (rows, batch) => {
      await db.pool.query('TRUNCATE outbox, outbox_aggregates');
      await db.pool.query(
        `INSERT INTO outbox (aggregate_id, topic, payload)
         SELECT 'agg-' || g, 'mail.send', '{}'::jsonb FROM generate_series(1, $1::int) g`,
        [rows],
      );
      await db.pool.query('ANALYZE outbox');
      const executor = fromPg(db.pool);
      let plan: PlanNode | undefined;
      // Runs the settle under EXPLAIN ANALYZE first (rolled back), then for real.
      const explaining: SqlExecutor = {
        query: async (text, values) => {
          if (text.includes('SET dispatched_at')) {
            const client = await db.pool.connect();
            try {
              await client.query('BEGIN');
              const { rows: out } = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
                `EXPLAIN (ANALYZE, FORMAT JSON) ${text}`,
                [...(values ?? [])],
              );
              plan = out[0]!['QUERY PLAN'][0].Plan;
            } finally {
              await client.query('ROLLBACK');
              client.release();
            }
          }
          return executor.query(text, values);
        },
      };
      const store = new PgOutboxStore(explaining);
      const claimed = await store.claim({
        owner: 'settle-plan-test',
        batchSize: batch,
        unorderedPatterns: ['%'],
        deadLettersBlock: false,
        leaseMs: 30_000,
      });
      expect(claimed).toHaveLength(batch);
      const settled = await store.settle(
        'settle-plan-test',
        claimed.map((m) => ({ rowId: m.rowId, kind: 'published' as const })),
      );
      expect(settled.sort()).toEqual(claimed.map((m) => m.rowId).sort());

      const all = nodes(plan!);
      const scans = all.filter((n) => n['Relation Name'] === 'outbox');
      expect(scans.length).toBeGreaterThan(0);
      expect(scans.map((n) => n['Node Type'])).not.toContain('Seq Scan');
      const expansions = all.filter((n) => n['Function Name'] === 'jsonb_to_recordset');
      expect(expansions.map((n) => n['Actual Loops'])).toEqual([1]);
    },
  );
});
