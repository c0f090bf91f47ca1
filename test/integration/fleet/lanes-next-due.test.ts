import { describe, expect, it } from 'vitest';
import { createLaneDispatcher, fromPg } from '../../../src/index.js';
import { laneNextDueSql } from '../../../src/sql/fleet.js';
import { explainAnalyze } from '../../helpers/explain.js';
import { blocksOf, noopPublisher, useHeldSnapshotDatabase } from '../../helpers/held-snapshot.js';
import { enqueueLanes } from '../../helpers/lanes.js';

/**
 * The lanes engine's next-due read (`laneNextDueSql`), which a fleet tenant runs as its turn
 * ends: nothing due once everything is consumed (not "now": that would reconnect the tenant in a
 * loop), a parked retry's due time when there is one, and the same buffers after 10,000 and
 * 40,000 consumed under a held REPEATABLE READ snapshot (it starts each lane at its cursor).
 */
const held = useHeldSnapshotDatabase();

async function explainNextDue() {
  const client = await held.current().pool.connect();
  try {
    // With statistics, as autovacuum gives a production table: without, the planner guessed and
    // the test read whichever plan that gave (a sequential scan a lane once it had them).
    await client.query('ANALYZE outbox_lanes, outbox_lane_messages, outbox_lane_parked');
    const plan = await explainAnalyze(client, laneNextDueSql('public'), []);
    const { rows } = await client.query<{ inMs: number | null }>(laneNextDueSql('public'));
    return { blocks: blocksOf(plan), inMs: rows[0]!.inMs };
  } finally {
    client.release();
  }
}

describe('fleet, lanes engine: when an idle tenant is next due', () => {
  it('nothing once consumed, a parked retry when there is one; bounded under a held snapshot', async () => {
    const pool = held.current().pool;
    const at: Record<number, { blocks: number; inMs: number | null; none: number | null }> = {};
    let consumed = 0;
    for (const total of [10_000, 40_000]) {
      for (; consumed < total; consumed += 1_000)
        await enqueueLanes(
          pool,
          Array.from({ length: 1_000 }, (_, i) => ({
            topic: 'payment.charge',
            aggregateId: `agg-${i % 50}`,
            payload: { i },
          })),
        );
      await createLaneDispatcher({ executor: fromPg(pool), publisher: noopPublisher }).drain();
      const none = (await explainNextDue()).inMs;
      // A retry due in a minute, parked on a consumed message of lane 0.
      await pool.query(
        `INSERT INTO outbox_lane_parked (lane, id, aggregate_id, ordered, head, blocks, attempts, available_at)
         SELECT lane, id, aggregate_id, ordered, true, true, 1, now() + interval '1 minute'
         FROM outbox_lane_messages WHERE lane = 0 ORDER BY id LIMIT 1`,
      );
      at[total] = { ...(await explainNextDue()), none };
      await pool.query(`DELETE FROM outbox_lane_parked`);
    }
    const why = JSON.stringify(at);
    console.log(`lanes next-due read under the held snapshot: ${why}`);
    for (const total of [10_000, 40_000]) {
      expect(at[total]!.none, why).toBeNull();
      expect(at[total]!.inMs, why).toBeGreaterThan(30_000);
      expect(at[total]!.inMs, why).toBeLessThanOrEqual(60_000);
    }
    expect(at[40_000]!.blocks, why).toBeLessThan(at[10_000]!.blocks * 1.5 + 50);
  }, 300_000);
});
