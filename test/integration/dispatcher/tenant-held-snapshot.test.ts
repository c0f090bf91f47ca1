import { beforeAll, describe, expect, it } from 'vitest';
import { createDispatcher, fromPg, PgOutboxStore, type SqlExecutor } from '../../../src/index.js';
import type { TestDatabase } from '../../helpers/database.js';
import { blocksOf, useHeldSnapshotDatabase, noopPublisher } from '../../helpers/held-snapshot.js';
import { explainAnalyze, rowsRead, type PlanNode } from '../../helpers/explain.js';

/**
 * The tenant claim (sql/tenant-claim.ts) beside a held snapshot (issue 25): tenant A's messages
 * are dispatched while a REPEATABLE READ transaction holds its snapshot, so their entries stay in
 * `outbox_tenant_ready_idx`. Finding tenant A (the hop of the loose index scan) starts at the
 * first entry of A and checks the lane floor on each entry: it steps over A's dead entries on
 * the index only, without reading their rows. Measured at two depths: the rows read stay the
 * same; the buffers grow by the index pages of what A dispatched (about 1 per 100 messages here),
 * not by its rows.
 */
const held = useHeldSnapshotDatabase();
let db: TestDatabase;
beforeAll(() => {
  db = held.current();
});

/** `count` messages of `tenant`, one per aggregate, through the insert trigger. */
async function insert(count: number, tenant: string) {
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload, headers)
     SELECT $2 || '-' || g || '-' || random(), 'payment.charge', '{}'::jsonb,
            jsonb_build_object('tenant_id', $2::text)
     FROM generate_series(1, $1::int) g`,
    [count, tenant],
  );
}

async function drain(): Promise<number> {
  const dispatcher = createDispatcher({ executor: fromPg(db.pool), publisher: noopPublisher });
  return (await dispatcher.drain()).published;
}

/** EXPLAIN (ANALYZE, BUFFERS) of one claim of 200, rolled back. */
async function explainClaim() {
  let plan: PlanNode | undefined;
  const client = await db.pool.connect();
  try {
    const explaining: SqlExecutor = {
      query: async <Row>(text: string, values?: readonly unknown[]) => {
        await client.query('BEGIN');
        plan = await explainAnalyze(client, text, values);
        await client.query('ROLLBACK');
        return (await client.query('SELECT 1 WHERE false')) as unknown as { rows: Row[] };
      },
    };
    await new PgOutboxStore(explaining, { approvalSweepIntervalMs: 3_600_000 }).claim({
      owner: 'explain#1',
      batchSize: 200,
      leaseMs: 1,
    });
  } finally {
    client.release();
  }
  const nodes = (n: PlanNode): PlanNode[] => [n, ...(n.Plans ?? []).flatMap(nodes)];
  const indexes = nodes(plan!)
    .filter((n) => n['Relation Name'] === 'outbox')
    .map((n) => (n as { 'Index Name'?: string })['Index Name']);
  return {
    rows: rowsRead(plan!),
    blocks: blocksOf(plan!),
    // outbox_ready_idx: the lane's floor and the oldest part; the rest goes by tenant.
    readyScans: indexes.filter((i) => i === 'outbox_ready_idx').length,
    tenantScans: indexes.filter((i) => i === 'outbox_tenant_ready_idx').length,
  };
}

describe('tenant claim under a held REPEATABLE READ snapshot', () => {
  it("the rows a claim reads stay the same after 10,000 and 40,000 of tenant A's messages were dispatched; buffers grow by index pages only", async () => {
    const at: Record<number, Awaited<ReturnType<typeof explainClaim>>> = {};
    let dispatched = 0;
    for (const total of [10_000, 40_000]) {
      await insert(total - dispatched, 'tenant-a');
      expect(await drain()).toBe(total - dispatched);
      dispatched = total;
      // Both tenants have work again: the claim visits both.
      await insert(100, 'tenant-a');
      await insert(100, 'tenant-b');
      at[total] = await explainClaim();
      expect(await drain()).toBe(200);
      dispatched += 100;
    }
    const why = JSON.stringify(at);
    console.log(`tenant claim of 200 under the held snapshot: ${why}`);
    const shallow = at[10_000]!;
    const deep = at[40_000]!;
    // The hop (its first step and its next), each tenant's share: by tenant, at both depths. A
    // per-tenant scan of outbox_ready_idx (filtering on the tenant, which the planner chose here
    // before the tenant part said "pending" its own way) would walk other tenants' heads.
    for (const claim of [shallow, deep]) {
      expect(claim.tenantScans, why).toBe(3);
      expect(claim.readyScans, why).toBe(2);
    }
    expect(deep.rows, why).toBeLessThan(1_000);
    expect(deep.rows, why).toBeLessThan(shallow.rows + 50);
    // 30,000 more of A's dispatched under the snapshot: index pages (~100 entries each), not
    // their rows (one page per row at worst).
    expect(deep.blocks - shallow.blocks, why).toBeLessThan(30_000 / 20);
  }, 300_000);
});
