import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { laneByIdsSql } from '../../../src/sql/lanes.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { explainAnalyze, rowsRead, type PlanNode } from '../../helpers/explain.js';
import { enqueueLanes } from '../../helpers/lanes.js';

/**
 * The read of the messages a wake-up named (`outbox_lane_by_ids`, migration 029) reaches them by
 * primary key whatever the table held when its connection cached the plan. A prepared statement
 * of the same SELECT, once generic (after five calls), is a sequential scan of
 * `outbox_lane_messages` on a small analyzed table, and keeps it while the table grows; the
 * function's plan is pinned (sql/lanes.ts says how). The plan read is the one PL/pgSQL caches on
 * a connection that has called the function often enough to keep a generic plan
 * (helpers/explain.ts, auto_explain).
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db?.drop());

interface Node extends PlanNode {
  'Node Type': string;
}
const nodes = (plan: Node): Node[] => [plan, ...((plan.Plans ?? []) as Node[]).flatMap(nodes)];

async function write(count: number): Promise<{ lane: number; id: string }[]> {
  for (let done = 0; done < count; done += 500)
    await enqueueLanes(
      db.pool,
      Array.from({ length: Math.min(500, count - done) }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: `a-${(done + i) % 97}`,
        payload: { i: done + i },
      })),
    );
  await db.pool.query('ANALYZE outbox_lane_messages');
  const { rows } = await db.pool.query<{ lane: number; id: string }>(
    'SELECT lane, id::text AS id FROM outbox_lane_messages ORDER BY id DESC LIMIT 3',
  );
  return rows;
}

describe('outbox_lane_by_ids', () => {
  it.each([200, 20_000])(
    'reads %i messages by primary key, with the plan a connection keeps',
    async (total) => {
      const before = await db.pool.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM outbox_lane_messages',
      );
      const named = await write(total - before.rows[0]!.n);
      await db.pool.query(`SELECT * FROM outbox_lane_balance('me', 600000, 16)`);
      const args = [named.map((r) => r.lane), named.map((r) => r.id), 'me', 100];
      const client = await db.pool.connect();
      try {
        // Enough calls for PL/pgSQL to settle on a generic plan, were it free to.
        for (let i = 0; i < 8; i++) await client.query(laneByIdsSql('public'), args);
        const { rows } = await client.query(laneByIdsSql('public'), args);
        const ids = (list: { id: string }[]) => list.map((r) => r.id).sort();
        expect(ids(rows as { id: string }[])).toEqual(ids(named));
        const plan = (await explainAnalyze(client, laneByIdsSql('public'), args)) as Node;
        const scans = nodes(plan).filter((n) => n['Relation Name'] === 'outbox_lane_messages');
        expect(scans.map((n) => n['Node Type'])).toEqual(['Index Scan']);
        // One probe per id named: nothing else of the table is read.
        expect(rowsRead(plan, 'outbox_lane_messages')).toBe(named.length);
      } finally {
        client.release();
      }
    },
  );
});
