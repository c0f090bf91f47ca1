import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg, PgOutboxStore, type SqlExecutor } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { explainAnalyze, rowsRead } from '../../helpers/explain.js';
import { resetOutbox } from '../../helpers/outbox-fixtures.js';

/**
 * Settles must reach their rows through the primary key whatever the outbox holds, and expand a
 * jsonb parameter at most once. The first settle (a plain join with jsonb_to_recordset, filtered
 * by lease owner) was planned as a sequential scan of the whole outbox on tables up to ~100k
 * rows, so every settle read every row; later attempts re-expanded the jsonb or the id array once
 * per row (sql/settle.ts). This runs the statements the store really sends under EXPLAIN ANALYZE.
 * (On a table of one page a sequential scan IS the cheapest path, and the failed-message settle
 * is planned per call, so tiny tables are not checked for it.)
 *
 * The settle of published messages runs inside `outbox_settle_advance` (migration 011), whose
 * plans PL/pgSQL caches per connection — a GENERIC plan after five calls, made whenever that
 * happens, on whatever the table held then. Its plans are read with auto_explain
 * (helpers/explain.ts), under `plan_cache_mode = force_generic_plan` too: the plan a connection
 * would keep, including one made on a nearly empty outbox.
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
    [10_000, 3, 'retry'],
    [20_000, 200, 'retry'],
  ] as const)(
    'with %i rows in the outbox, a batch of %i %s messages settles through outbox_pkey, expanding its records at most once',
    async (rows, batch, kind) => {
      await fill(rows);
      const executor = fromPg(db.pool);
      let plan: PlanNode | undefined;
      // Runs the settle under EXPLAIN ANALYZE first (rolled back), then for real.
      const explaining: SqlExecutor = {
        query: async (text, values) => {
          if (/^\s*UPDATE \S+(?: o)?\s+SET dead_lettered_at /.test(text)) {
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
      const claimed = await claim(store, batch);
      const settled = await store.settle(
        'settle-plan-test',
        claimed.map((m) => ({ rowId: m.rowId, kind, error: 'broker down', delayMs: 1_000 })),
        { deadLettersBlock: true, leaseMs: 30_000 },
      );
      expect(settled.settled.sort()).toEqual(claimed.map((m) => m.rowId).sort());
      checkPlan(plan!, 1);
    },
  );

  it.each([
    [0, 3, 'auto'],
    [2_000, 3, 'auto'],
    [10_000, 3, 'auto'],
    [20_000, 200, 'auto'],
    // The plan a connection keeps, made on a nearly empty outbox and then on a larger one.
    [20, 3, 'force_generic_plan'],
    [20_000, 200, 'force_generic_plan'],
  ] as const)(
    'with %i rows in the outbox, a batch of %i published messages settles through outbox_pkey (plan_cache_mode %s)',
    async (rows, batch, planCacheMode) => {
      await fill(rows + 6 + batch);
      const client = await db.pool.connect();
      const plans: PlanNode[] = [];
      try {
        await client.query(`SET plan_cache_mode = ${planCacheMode}`);
        // The settle's plan is read while it runs for real (auto_explain, helpers/explain.ts),
        // undone, then run again for its result.
        const executor: SqlExecutor = {
          query: async <Row>(text: string, values?: readonly unknown[]) => {
            if (text.includes('outbox_settle_advance(')) {
              await client.query('BEGIN');
              plans.push((await explainAnalyze(client, text, values)) as PlanNode);
              await client.query('ROLLBACK');
            }
            return (await client.query(text, [...(values ?? [])])) as unknown as { rows: Row[] };
          },
        };
        const store = new PgOutboxStore(executor);
        // Seven settles on one connection: PL/pgSQL's plan cache goes generic after five. Before
        // the last, the outbox grows by 20,000 rows past the plan (no ANALYZE: the cached plan stays).
        for (let round = 0; round < 7; round++) {
          if (round === 6) await grow(20_000);
          const claimed = await claim(store, round === 6 ? batch : 1);
          const settled = await store.settle(
            'settle-plan-test',
            claimed.map((m) => ({ rowId: m.rowId, kind: 'published' as const })),
            { deadLettersBlock: true, leaseMs: 30_000 },
          );
          expect(settled.settled.sort()).toEqual(claimed.map((m) => m.rowId).sort());
        }
      } finally {
        await client.query('RESET plan_cache_mode');
        client.release(true);
      }
      expect(plans).toHaveLength(7);
      for (const plan of plans) checkPlan(plan, 0);
      expect(rowsRead(plans.at(-1)!)).toBeLessThan(batch * 10);
    },
  );
});

async function fill(rows: number): Promise<void> {
  await resetOutbox(db.pool);
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload)
     SELECT 'agg-' || g, 'mail.send', '{}'::jsonb FROM generate_series(1, $1::int) g`,
    [rows],
  );
  await db.pool.query('ANALYZE outbox');
}

/** More rows, without ANALYZE. */
async function grow(rows: number): Promise<void> {
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload)
     SELECT 'more-' || g, 'mail.send', '{}'::jsonb FROM generate_series(1, $1::int) g`,
    [rows],
  );
}

async function claim(store: PgOutboxStore, batch: number) {
  const claimed = await store.claim({
    owner: 'settle-plan-test',
    batchSize: batch,
    leaseMs: 30_000,
  });
  expect(claimed).toHaveLength(batch);
  return claimed;
}

/** Every outbox scan through an index; jsonb expanded `expansions` times, arrays once. */
function checkPlan(plan: PlanNode, expansions: number): void {
  const all = nodes(plan);
  const scans = all.filter((n) => n['Relation Name'] === 'outbox');
  expect(scans.length).toBeGreaterThan(0);
  expect(scans.map((n) => n['Node Type'])).not.toContain('Seq Scan');
  const jsonb = all.filter((n) => n['Function Name'] === 'jsonb_to_recordset');
  expect(jsonb.map((n) => n['Actual Loops'])).toEqual(expansions ? [expansions] : []);
  const arrays = all.filter((n) => n['Function Name'] === 'unnest');
  expect(arrays.every((n) => n['Actual Loops'] === 1)).toBe(true);
}
