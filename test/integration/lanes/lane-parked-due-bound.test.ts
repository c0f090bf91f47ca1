import { beforeAll, describe, expect, it } from 'vitest';
import { laneLeaveSql, laneNextParkedDueSql } from '../../../src/sql/lanes.js';
import type { TestDatabase } from '../../helpers/database.js';
import { explainAnalyze, rowsRead } from '../../helpers/explain.js';
import { blocksOf, useHeldSnapshotDatabase } from '../../helpers/held-snapshot.js';
import { drainLanes, writeLanesInCommits } from '../../helpers/lane-bound.js';

/**
 * `laneNextParkedDueSql` (when the first parked head of a dispatcher's lanes comes due) is asked
 * after every look of the parked path that found none due: what it reads must not grow with
 * what is parked. Messages delayed by an hour, each of an aggregate of its own, are parked by
 * the drain that reads them (200, then 5,200), under a REPEATABLE READ snapshot held open the
 * whole time; the statement reads one parked row a lane either way.
 */
const held = useHeldSnapshotDatabase();
let db: TestDatabase;
beforeAll(() => {
  db = held.current();
});

const LANES = 16;

async function parkDelayed(count: number, prefix: string): Promise<void> {
  await writeLanesInCommits(db.pool, count, 500, (n) => ({
    topic: 'mail.send',
    aggregateId: `${prefix}-${n}`,
    payload: { n },
    delayMs: 3_600_000,
  }));
  await drainLanes(db.pool);
}

/** The statement for an owner of every lane, explained and then run; the lanes given back. */
async function explainedNextDue() {
  await db.pool.query(`SELECT * FROM outbox_lane_balance('explained', 60000, ${LANES})`);
  const client = await db.pool.connect();
  try {
    const plan = await explainAnalyze(client, laneNextParkedDueSql('public'), ['explained']);
    const { rows } = await client.query<{ inMs: number | null }>(laneNextParkedDueSql('public'), [
      'explained',
    ]);
    return { plan, inMs: rows[0]?.inMs ?? null };
  } finally {
    client.release();
    await db.pool.query(laneLeaveSql('public'), ['explained']);
  }
}

describe('lanes engine: when the parked messages come due (G7)', () => {
  it('reads one parked row a lane beside 200 and 5,200 parked messages, under a held snapshot', async () => {
    const none = await explainedNextDue();
    expect(none.inMs).toBeNull();
    await parkDelayed(200, 'few');
    const shallow = await explainedNextDue();
    await parkDelayed(5_000, 'many');
    const deep = await explainedNextDue();
    const parked = await db.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM outbox_lane_parked',
    );
    expect(parked.rows[0]!.n).toBe(5_200);
    const rows = (p: typeof deep.plan) => rowsRead(p, 'outbox_lane_parked');
    console.log(
      `[lanes bound] next parked due: parked rows read ${rows(shallow.plan)} -> ${rows(deep.plan)}, buffers ${blocksOf(shallow.plan)} -> ${blocksOf(deep.plan)}`,
    );
    // Due in about an hour (the first one parked), in ms.
    expect(deep.inMs).toBeGreaterThan(3_500_000);
    expect(deep.inMs).toBeLessThanOrEqual(3_600_000);
    expect(rows(shallow.plan)).toBeLessThanOrEqual(LANES);
    expect(rows(deep.plan)).toBeLessThanOrEqual(LANES);
    // An index descent a lane: a few buffers each, whatever is parked.
    expect(blocksOf(deep.plan)).toBeLessThanOrEqual(blocksOf(shallow.plan) + 2 * LANES);
  }, 180_000);
});
