import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PgOutboxStore, type SqlExecutor } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { explainAnalyze, rowsRead, type PlanNode } from '../../helpers/explain.js';

/**
 * The tenant claim (sql/tenant-claim.ts) keeps a claim's cost bounded by its batch (G7) with one
 * tenant and with many: it visits at most half the batch of tenants, a hop each, and reads each
 * one's share from its oldest due head. Read with EXPLAIN (ANALYZE, BUFFERS) inside
 * `outbox_claim`, through auto_explain, as claim-bound.test.ts does: the statement the store
 * really sends, with the store's cursor.
 *
 * The outboxes are loaded with triggers off (ready heads, one message per aggregate, as the
 * insert trigger would write them): a million trigger calls take minutes on a busy 2-core machine.
 */
let db: TestDatabase;
const BIG = 100_000;
const TENANTS = 1_000_000;

/**
 * Ready heads, one per aggregate, with tenant `tenant` for g in 1..count (SQL expressions of g),
 * due in the order of g, or the reverse with `newestFirst`.
 */
async function load(count: number, aggregate: string, tenant: string, newestFirst = false) {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`SET LOCAL session_replication_role = replica`);
    await client.query(
      `INSERT INTO outbox (aggregate_id, topic, payload, headers, sequence, ordered, ready,
                           available_at, attempts)
       SELECT ${aggregate}, 'mail.send', '{}'::jsonb, jsonb_build_object('tenant_id', ${tenant}),
              1, true, true, now() - interval '1 minute' + ${newestFirst ? '-' : ''}g * interval '1 microsecond', 0
       FROM generate_series(1, $1::int) g`,
      [count],
    );
    await client.query('COMMIT');
  } finally {
    client.release();
  }
  await db.pool.query('ANALYZE outbox');
}

beforeAll(async () => {
  db = await createTestDatabase();
}, 60_000);
afterAll(async () => {
  await db?.drop();
});

const nodes = (plan: PlanNode): PlanNode[] => [plan, ...(plan.Plans ?? []).flatMap(nodes)];
type Node = PlanNode & { 'Node Type'?: string; 'Index Name'?: string };

/**
 * `claims` claims of `batchSize` through one store (so its cursor moves), each explained and
 * then run for its result; all in one transaction rolled back at the end, so the outbox is left
 * as loaded and each claim sees the leases of the ones before.
 */
async function explainClaims(batchSize: number, claims = 1, planCacheMode = 'auto') {
  const plans: PlanNode[] = [];
  const results: { tenant: string; aggregateId: string; sequence: number }[][] = [];
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`SET LOCAL plan_cache_mode = ${planCacheMode}`);
    const explaining: SqlExecutor = {
      query: async <Row>(text: string, values?: readonly unknown[]) => {
        await client.query('SAVEPOINT explained');
        plans.push(await explainAnalyze(client, text, values));
        await client.query('ROLLBACK TO SAVEPOINT explained');
        return (await client.query(text, [...(values ?? [])])) as unknown as { rows: Row[] };
      },
    };
    const store = new PgOutboxStore(explaining, { approvalSweepIntervalMs: 3_600_000 });
    for (let i = 0; i < claims; i++) {
      const claimed = await store.claim({ owner: `explain#${i}`, batchSize, leaseMs: 30_000 });
      results.push(
        claimed.map((m) => ({
          tenant: m.headers['tenant_id'] ?? '',
          aggregateId: m.aggregateId,
          sequence: m.sequence,
        })),
      );
    }
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
  // The first claim of a store may run the approvals' expiry sweep first: only the claims count.
  const claimPlans = plans.slice(-claims);
  return claimPlans.map((plan, i) => {
    const all = nodes(plan) as Node[];
    const scans = all.filter((n) => n['Relation Name'] === 'outbox');
    return {
      rowsRead: rowsRead(plan),
      blocks: (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0),
      claimed: results[i]!,
      nodeTypes: all.map((n) => n['Node Type']),
      indexes: scans.map((n) => n['Index Name']),
      why: JSON.stringify(
        scans.map((n) => [n['Node Type'], n['Index Name'], n['Actual Rows'], n['Actual Loops']]),
      ),
    };
  });
}

describe('tenant claim cost', () => {
  it('one tenant with 100,000 due heads beside a small one: a claim of 200 reads about 200 rows and takes the small tenant along', async () => {
    await load(BIG, `'big-' || g`, `'big'`);
    await load(5, `'small-' || g`, `'small'`);
    const [claim] = await explainClaims(200);
    const { rowsRead, blocks, claimed, indexes, why } = claim!;
    console.log('one tenant, 100,000 heads:', JSON.stringify({ rowsRead, blocks }));
    expect(claimed).toHaveLength(200);
    // The small tenant's 5 are newer than all of big's 100,000: oldest-first would not take them.
    expect(claimed.filter((m) => m.tenant === 'small')).toHaveLength(5);
    expect(indexes, why).toContain('outbox_tenant_ready_idx');
    expect(rowsRead, why).toBeLessThan(1_000);
    expect(blocks, why).toBeLessThan(5_000);
  }, 120_000);

  it('a tenant whose heads are all in flight is stepped over like any leased head: rows stay near a batch', async () => {
    // 150 of big's oldest heads leased by another dispatcher: both parts step over them.
    await db.pool.query(
      `UPDATE outbox SET lease_owner = 'other', lease_expires_at = now() + interval '1 hour'
       WHERE id IN (SELECT id FROM outbox WHERE aggregate_id LIKE 'big-%' ORDER BY available_at LIMIT 150)`,
    );
    try {
      const [claim] = await explainClaims(200);
      expect(claim!.claimed).toHaveLength(200);
      expect(claim!.claimed.filter((m) => m.tenant === 'small')).toHaveLength(5);
      expect(claim!.rowsRead, claim!.why).toBeLessThan(1_500);
    } finally {
      await db.pool.query(`UPDATE outbox SET lease_owner = NULL, lease_expires_at = NULL`);
    }
  }, 60_000);

  it('100,000 messages behind one head of a third tenant: its share takes a run in order, and reads stay near a batch', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`SET LOCAL session_replication_role = replica`);
      await client.query(
        `INSERT INTO outbox (aggregate_id, topic, payload, headers, sequence, ordered, ready, attempts)
         SELECT 'deep', 'mail.send', '{}'::jsonb, '{"tenant_id": "deep"}', g, true, g = 1, 0
         FROM generate_series(1, $1::int) g`,
        [BIG],
      );
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    await db.pool.query('ANALYZE outbox');
    const [claim] = await explainClaims(200);
    const deep = claim!.claimed.filter((m) => m.tenant === 'deep');
    // Three tenants visited: a share of 100 / 3 = 33 each, the head and a run of 32 for deep.
    expect(deep.map((m) => m.sequence).sort((x, y) => x - y)).toEqual(
      Array.from({ length: 33 }, (_, k) => k + 1),
    );
    expect(claim!.claimed).toHaveLength(200);
    expect(claim!.claimed.filter((m) => m.tenant === 'small')).toHaveLength(5);
    console.log(
      'a deep tenant beside them:',
      JSON.stringify({ rowsRead: claim!.rowsRead, blocks: claim!.blocks }),
    );
    expect(claim!.rowsRead, claim!.why).toBeLessThan(1_000);
  }, 60_000);

  it.each(['auto', 'force_generic_plan'])(
    '1,000,000 tenants with a message each (plan_cache_mode %s): a claim visits at most 100 of them, reads about a batch, and the next claims go round',
    async (planCacheMode) => {
      if (planCacheMode === 'auto') {
        await db.pool.query('TRUNCATE outbox');
        // Due in the reverse order of their names: the oldest part takes the last names, the
        // tenant part the first ones after the cursor, so each claim shows which it visited.
        await load(TENANTS, `'t-' || g`, `'t-' || lpad(g::text, 7, '0')`, true);
      }
      // Seven claims: PL/pgSQL's plan cache goes generic after five.
      const claims = await explainClaims(200, 7, planCacheMode);
      const name = (g: number) => `t-${String(g).padStart(7, '0')}`;
      console.log(
        `${TENANTS} tenants (${planCacheMode}):`,
        JSON.stringify(claims.map((c) => ({ rows: c.rowsRead, blocks: c.blocks }))),
      );
      for (const [i, claim] of claims.entries()) {
        const { rowsRead, blocks, claimed, nodeTypes, indexes, why } = claim;
        expect(claimed).toHaveLength(200);
        expect(rowsRead, `claim ${i}: ${why}`).toBeLessThan(2_000);
        expect(blocks, `claim ${i}: ${why}`).toBeLessThan(10_000);
        expect(nodeTypes, why).not.toContain('Seq Scan');
        expect(nodeTypes, why).not.toContain('Sort');
        // outbox_ready_idx only for the lane's floor and the oldest part; the hop (first and
        // next) and each tenant's share by tenant.
        expect(
          indexes.filter((x) => x === 'outbox_ready_idx'),
          why,
        ).toHaveLength(2);
        expect(
          indexes.filter((x) => x === 'outbox_tenant_ready_idx'),
          why,
        ).toHaveLength(3);
        // Claim i visits the 100 tenants after the previous claim's last (one head each, their
        // share), and takes the 100 oldest others: the round goes on where the last one stopped.
        const tenants = new Set(claimed.map((m) => m.tenant));
        const visited = Array.from({ length: 100 }, (_, k) => name(i * 100 + k + 1));
        const oldest = Array.from({ length: 100 }, (_, k) => name(TENANTS - i * 100 - k));
        expect([...tenants].sort()).toEqual([...visited, ...oldest].sort());
      }
    },
    180_000,
  );
});
