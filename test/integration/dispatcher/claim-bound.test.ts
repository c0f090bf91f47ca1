import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { explainedClaim, rowsRead, type PlanNode } from '../../helpers/explain.js';
import { insertWithTriggersOff } from '../../helpers/outbox-fixtures.js';

/**
 * Issue 16: a claim's work follows the batch, not the backlog. 100,000 pending messages sit on
 * ONE aggregate; the claim is run under EXPLAIN (ANALYZE, BUFFERS) — the statement the store
 * really sends — and the rows it reads from the outbox are counted, for each state the deep
 * aggregate's head can be in. Before migration 009 every one of these read all 100,001 rows
 * ("Rows Removed by Filter: 99999", 304k buffers, 1.9 s).
 */
let db: TestDatabase;
const DEEP = 100_000;
const OTHERS = 200;

beforeAll(async () => {
  db = await createTestDatabase();
  // Loaded the way the insert trigger would write it (sequence 1..n, only the head ready).
  await insertWithTriggersOff(db.pool, [
    {
      text: `INSERT INTO outbox (aggregate_id, topic, payload, sequence, ordered, ready)
       SELECT 'deep', 'payment.charge', jsonb_build_object('n', g), g, true, g = 1
       FROM generate_series(1, $1::int) g`,
      values: [DEEP],
    },
    {
      text: `INSERT INTO outbox_aggregates (aggregate_id, last_sequence) VALUES ('deep', $1)`,
      values: [DEEP],
    },
  ]);
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload)
     SELECT 'other-' || g, 'payment.charge', '{}'::jsonb FROM generate_series(1, $1::int) g`,
    [OTHERS],
  );
  await db.pool.query('ANALYZE outbox');
}, 120_000);
afterAll(async () => {
  await db?.drop();
});

const nodes = (plan: PlanNode): PlanNode[] => [plan, ...(plan.Plans ?? []).flatMap(nodes)];

/** Claims under EXPLAIN (ANALYZE, BUFFERS) in a transaction that is rolled back. */
async function explainClaim(batchSize: number) {
  const { plan, claimed } = await explainedClaim(db.pool, {
    owner: 'explain#1',
    batchSize,
    leaseMs: 30_000,
  });
  // Buffer counts of a node include its children's: the root's are the statement's.
  const blocks = (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0);
  // On failure, the plan's outbox scans say where the rows went.
  const scans = nodes(plan)
    .filter((n) => n['Relation Name'] === 'outbox')
    .map((n) => ({
      node: (n as { 'Node Type'?: string })['Node Type'],
      index: (n as { 'Index Name'?: string })['Index Name'],
      rows: n['Actual Rows'],
      loops: n['Actual Loops'],
      removed: n['Rows Removed by Filter'],
    }));
  return { rowsRead: rowsRead(plan), blocks, claimed, why: JSON.stringify(scans) };
}

const deepHead = `(SELECT id FROM outbox WHERE aggregate_id = 'deep' AND sequence = 1)`;

describe('claim cost with 100,000 messages behind one head', () => {
  it('a due head: the claim takes a run of the deep aggregate and reads about a batch of rows', async () => {
    const { rowsRead, claimed, why } = await explainClaim(200);
    const deep = claimed.filter((m) => m.aggregateId === 'deep').map((m) => m.sequence);
    // 201 heads are ready; 200 are taken and only their ordered runs could follow (no room).
    expect(claimed).toHaveLength(200);
    expect(deep.length).toBeLessThanOrEqual(1);
    expect(rowsRead, why).toBeLessThan(1_000);
  });

  it('a hot aggregate alone: one claim takes a run of up to a batch, in order, reading about that many rows', async () => {
    await db.pool.query(`UPDATE outbox SET lease_expires_at = now() + interval '1 hour'
                         WHERE aggregate_id LIKE 'other-%'`);
    try {
      const { rowsRead, claimed, why } = await explainClaim(200);
      expect(claimed.map((m) => m.sequence)).toEqual(Array.from({ length: 200 }, (_, i) => i + 1));
      expect(rowsRead, why).toBeLessThan(1_000);
    } finally {
      await db.pool.query(
        `UPDATE outbox SET lease_expires_at = NULL WHERE aggregate_id LIKE 'other-%'`,
      );
    }
  });

  it.each([
    ['leased (in flight)', `lease_owner = 'x', lease_expires_at = now() + interval '1 hour'`],
    ['backing off', `available_at = now() + interval '1 hour', last_error = 'broker down'`],
    ['dead-lettered under hold', `dead_lettered_at = now(), last_error = 'poison'`],
  ])(
    'a head %s costs the claim nothing: 200 other heads come back, and the rows read stay near 200',
    async (_state, set) => {
      await db.pool.query(`UPDATE outbox SET ${set} WHERE id = ${deepHead}`);
      try {
        const { rowsRead, blocks, claimed, why } = await explainClaim(200);
        expect(claimed.filter((m) => m.aggregateId === 'deep')).toEqual([]);
        expect(claimed, why).toHaveLength(OTHERS);
        expect(rowsRead, why).toBeLessThan(1_000);
        // Rows are the bound; buffers only a backstop: ~2,600 for 200 heads on a fresh table,
        // up to ~7,600 once earlier cases' rolled-back leases left dead versions to step over
        // (same plan, same rows). The walk of the old claim read 304k.
        expect(blocks, why).toBeLessThan(20_000);
      } finally {
        await db.pool.query(
          `UPDATE outbox SET lease_owner = NULL, lease_expires_at = NULL, available_at = created_at,
                  dead_lettered_at = NULL, last_error = NULL
           WHERE id = ${deepHead}`,
        );
      }
    },
  );
});
