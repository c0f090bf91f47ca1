import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FleetMembership } from '../../../src/fleet/membership.js';
import type { SqlExecutor } from '../../../src/index.js';
import { explainAnalyze } from '../../helpers/explain.js';
import { blocksOf, useHeldSnapshotDatabase } from '../../helpers/held-snapshot.js';

/**
 * Fleet ownership lives in the control database, and a snapshot held open there (pg_dump, a
 * report) keeps every row version an ownership round writes from vacuum. A round must not write
 * a row per owned tenant, or every later round reads through tenants × rounds dead versions.
 * Two members (scopes of their own) make the same number of rounds under a held REPEATABLE READ
 * snapshot, one owning 300 tenants and one 10; the buffers of their next round, counted with
 * EXPLAIN (ANALYZE, BUFFERS), must not differ with what they own.
 */
const held = useHeldSnapshotDatabase();
let client: pg.Client;

beforeAll(async () => {
  client = new pg.Client({ connectionString: held.current().url });
  await client.connect();
});
afterAll(async () => {
  await client?.end();
});

/** Runs each statement for real; while `counting`, adds what its EXPLAIN (ANALYZE, BUFFERS) read. */
function countingExecutor(): { executor: SqlExecutor; blocks: { n: number; counting: boolean } } {
  const blocks = { n: 0, counting: false };
  const executor: SqlExecutor = {
    query: async <Row>(text: string, values?: readonly unknown[]) => {
      if (blocks.counting) {
        await client.query('BEGIN');
        blocks.n += blocksOf(await explainAnalyze(client, text, values));
        await client.query('ROLLBACK');
      }
      return (await client.query(text, [...(values ?? [])])) as unknown as { rows: Row[] };
    },
  };
  return { executor, blocks };
}

describe('fleet ownership under a held REPEATABLE READ snapshot on the control database', () => {
  it('a round reads the same whether the member owns 300 tenants or 10, after 150 rounds', async () => {
    const roundBlocks: Record<string, number> = {};
    for (const owned of [300, 10]) {
      const { executor, blocks } = countingExecutor();
      const membership = new FleetMembership({
        control: executor,
        member: `m-${owned}`,
        scope: `tenant_${owned}_%`,
        leaseMs: 60_000,
      });
      await membership.join();
      const tenants = Array.from({ length: owned }, (_, i) => `tenant_${owned}_${i}`);
      for (let round = 0; round < 150; round++) await membership.reconcile(tenants);
      expect(membership.owned.size).toBe(owned);
      blocks.counting = true;
      await membership.reconcile(tenants);
      roundBlocks[owned] = blocks.n;
    }
    const why = JSON.stringify(roundBlocks);
    console.log(`one ownership round after 150 under the held snapshot, by tenants owned: ${why}`);
    expect(roundBlocks[300]!, why).toBeLessThan(roundBlocks[10]! * 2 + 20);
  }, 300_000);
});
