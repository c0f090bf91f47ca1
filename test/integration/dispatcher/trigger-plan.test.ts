import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { nestedPlans, type LoggedPlan, type PlanNode } from '../../helpers/explain.js';

/**
 * The insert trigger's order check (migration 012: is my predecessor pending?) must stay one
 * primary-key probe in the plan PL/pgSQL caches. Written as `dispatched_at IS NULL`, the cached
 * generic plan scanned `outbox_aggregate_pending_idx` (a partial index whose predicate that
 * condition implies) for the id: 20,000 messages written to one aggregate in one transaction took
 * 147 s instead of 13. Read here with auto_explain under `plan_cache_mode = force_generic_plan`.
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

describe('insert trigger plan', () => {
  it("the order check probes the predecessor by primary key, in a cached generic plan, after the aggregate's chain grew", async () => {
    const client = await db.pool.connect();
    let plans: LoggedPlan[] = [];
    try {
      await client.query('SET plan_cache_mode = force_generic_plan');
      await client.query('BEGIN');
      await client.query(
        `INSERT INTO outbox (aggregate_id, topic, payload)
         SELECT 'chain', 'payment.charge', '{}' FROM generate_series(1, 2000)`,
      );
      plans = await nestedPlans(client, () =>
        client.query(
          `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('chain', 'payment.charge', '{}')`,
        ),
      );
    } finally {
      await client.query('ROLLBACK');
      await client.query('RESET plan_cache_mode');
      client.release();
    }
    const check = (plans as { 'Query Text': string; Plan: Node }[]).find((p) =>
      /num_nulls\(p\.dispatched_at\)/.test(p['Query Text']),
    );
    expect(check, plans.map((p) => p['Query Text'].slice(0, 60)).join('\n')).toBeDefined();
    const scans = nodes(check!.Plan).filter((n) => n['Relation Name'] === 'outbox');
    const why = JSON.stringify(scans.map((n) => [n['Node Type'], n['Index Name']]));
    expect(
      scans.map((n) => n['Index Name']),
      why,
    ).toEqual(['outbox_pkey']);
    expect(
      scans.reduce((sum, n) => sum + (n['Actual Rows'] ?? 0) * (n['Actual Loops'] ?? 1), 0),
      why,
    ).toBe(1);
  }, 60_000);
});
