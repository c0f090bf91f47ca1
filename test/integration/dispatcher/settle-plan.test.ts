import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg, PgOutboxStore, type SqlExecutor } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';

/**
 * Settles must reach their rows through the primary key whatever the outbox holds, and expand a
 * jsonb parameter at most once. The first settle (a plain join with jsonb_to_recordset, filtered
 * by lease owner) was planned as a sequential scan of the whole outbox on tables up to ~100k
 * rows, so every settle read every row; later attempts re-expanded the jsonb or the id array once
 * per row (sql/settle.ts). This runs the statements the store really sends under EXPLAIN ANALYZE.
 * (On a table of one page a sequential scan IS the cheapest path, and settles are planned per
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
  'Function Name'?: string;
  'Actual Loops'?: number;
  Plans?: PlanNode[];
}

const nodes = (plan: PlanNode): PlanNode[] => [plan, ...(plan.Plans ?? []).flatMap(nodes)];

describe('settle plan', () => {
  it.each([
    [2_000, 3, 'published'],
    [10_000, 3, 'published'],
    [20_000, 200, 'published'],
    [10_000, 3, 'retry'],
    [20_000, 200, 'retry'],
  ] as const)(
    'with %i rows in the outbox, a batch of %i %s messages settles through outbox_pkey, expanding its records at most once',
    async (rows, batch, kind) => {
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
          if (
            /^\s*(WITH mine |UPDATE \S+(?: o)?\s+SET (dispatched_at|dead_lettered_at) )/.test(text)
          ) {
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
        leaseMs: 30_000,
      });
      expect(claimed).toHaveLength(batch);
      const settled = await store.settle(
        'settle-plan-test',
        claimed.map((m) =>
          kind === 'published'
            ? { rowId: m.rowId, kind }
            : { rowId: m.rowId, kind, error: 'broker down', delayMs: 1_000 },
        ),
        { deadLettersBlock: true, leaseMs: 30_000 },
      );
      expect(settled.settled.sort()).toEqual(claimed.map((m) => m.rowId).sort());

      const all = nodes(plan!);
      const scans = all.filter((n) => n['Relation Name'] === 'outbox');
      expect(scans.length).toBeGreaterThan(0);
      expect(scans.map((n) => n['Node Type'])).not.toContain('Seq Scan');
      const expansions = all.filter((n) => n['Function Name'] === 'jsonb_to_recordset');
      expect(expansions.map((n) => n['Actual Loops'])).toEqual(kind === 'published' ? [] : [1]);
      const arrays = all.filter((n) => n['Function Name'] === 'unnest');
      expect(arrays.every((n) => n['Actual Loops'] === 1)).toBe(true);
    },
  );
});
