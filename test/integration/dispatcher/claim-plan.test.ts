import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PgOutboxStore, type SqlExecutor } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { explainAnalyze, rowsRead, type PlanNode } from '../../helpers/explain.js';
import { resetOutbox } from '../../helpers/outbox-fixtures.js';

/**
 * The claim runs inside `outbox_claim` (migration 011), whose plan PL/pgSQL caches per connection
 * — a GENERIC plan after five calls, made on whatever the outbox held then, and kept while it
 * grows until the next ANALYZE. A prepared claim once went from p95 11 ms to 225 ms that way
 * (statement-name.ts). The function pins the plan's shape (sql/claim.ts); this reads the plans it
 * really caches, with auto_explain, under `plan_cache_mode = force_generic_plan` and the default,
 * on an outbox of 20 rows and then — same connection, same cached plan, no ANALYZE — of 50,000.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

type Node = PlanNode & { 'Node Type': string; 'Index Name'?: string };
const nodes = (plan: Node): Node[] => [plan, ...((plan.Plans ?? []) as Node[]).flatMap(nodes)];

describe('claim plan', () => {
  it.each(['force_generic_plan', 'auto'] as const)(
    'plan_cache_mode %s: every cached plan walks outbox_ready_idx in due order, on 20 rows and after growing to 50,000',
    async (planCacheMode) => {
      await resetOutbox(db.pool);
      await insert(20);
      await db.pool.query('ANALYZE outbox');
      const client = await db.pool.connect();
      const plans: Node[] = [];
      try {
        await client.query(`SET plan_cache_mode = ${planCacheMode}`);
        const executor: SqlExecutor = {
          query: async <Row>(text: string, values?: readonly unknown[]) => {
            if (!text.includes('outbox_claim(')) {
              return (await client.query(text, [...(values ?? [])])) as unknown as { rows: Row[] };
            }
            // auto_explain reads the plan while the claim runs for real: the rows come from a
            // second run of the same call, after the first is undone.
            await client.query('BEGIN');
            plans.push((await explainAnalyze(client, text, values)) as Node);
            await client.query('ROLLBACK');
            return (await client.query(text, [...(values ?? [])])) as unknown as { rows: Row[] };
          },
        };
        const store = new PgOutboxStore(executor);
        const claim = (batchSize: number) =>
          store.claim({ owner: `plan#${plans.length}`, batchSize, leaseMs: 30_000 });
        // Seven claims: PL/pgSQL's plan cache goes generic after five.
        for (let i = 0; i < 7; i++) expect(await claim(1)).toHaveLength(1);
        // The outbox grows past the plan (no ANALYZE: the cached plan stays).
        await insert(50_000);
        const claimed = await claim(200);
        expect(claimed).toHaveLength(200);
        expect(rowsRead(plans.at(-1)!), summary(plans.at(-1)!)).toBeLessThan(1_000);
      } finally {
        await client.query('RESET plan_cache_mode');
        client.release(true);
      }
      expect(plans).toHaveLength(8);
      for (const plan of plans) {
        const all = nodes(plan);
        const outboxScans = all.filter((n) => n['Relation Name'] === 'outbox');
        const why = summary(plan);
        expect(outboxScans.map((n) => n['Node Type']).sort(), why).not.toContain('Seq Scan');
        expect(
          outboxScans.map((n) => n['Node Type']),
          why,
        ).not.toContain('Bitmap Heap Scan');
        expect(
          all.map((n) => n['Node Type']),
          why,
        ).not.toContain('Sort');
        expect(
          outboxScans.map((n) => n['Index Name']),
          why,
        ).toContain('outbox_ready_idx');
      }
    },
    60_000,
  );
});

async function insert(rows: number): Promise<void> {
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload)
     SELECT 'agg-' || g || '-' || random(), 'mail.send', '{}'::jsonb FROM generate_series(1, $1::int) g`,
    [rows],
  );
}

/** The plan's nodes, one line each: what a failure message needs. */
function summary(plan: Node): string {
  return nodes(plan)
    .map(
      (n) =>
        `${n['Node Type']} ${n['Relation Name'] ?? ''} ${n['Index Name'] ?? ''} rows=${n['Actual Rows']} loops=${n['Actual Loops']} removed=${n['Rows Removed by Filter'] ?? 0}`,
    )
    .join('\n');
}
