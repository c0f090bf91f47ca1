import { beforeAll, describe, expect, it } from 'vitest';
import {
  LANE_SAMPLE_ID_WINDOW,
  LANE_SAMPLE_PARKED_LIMIT,
  LaneDashboardSampler,
} from '../../../src/dashboard/lane-sampler.js';
import { LATENCY_EDGES_SECONDS } from '../../../src/dashboard/state.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { LANE_COUNT } from '../../../src/migrations/024-lanes.js';
import { laneSampleSql } from '../../../src/sql/dashboard-lanes.js';
import { fromPg } from '../../../src/store/from-pg.js';
import type { TestDatabase } from '../../helpers/database.js';
import { explainAnalyze, rowsRead, type PlanNode } from '../../helpers/explain.js';
import { blocksOf, noopPublisher, useHeldSnapshotDatabase } from '../../helpers/held-snapshot.js';
import { enqueueLanes } from '../../helpers/lanes.js';

/**
 * The dashboard's lanes sample (every 5 s while `outbox ui --engine lanes` runs) reads a window of
 * ids past each lane's previous cursor and a bounded number of parked rows, whatever the backlog
 * or what the cursors passed, under a REPEATABLE READ snapshot held open the whole time: counted
 * with EXPLAIN (ANALYZE, BUFFERS) after the cursors moved 2,000 and 20,000 ids, so growth fails.
 */
const held = useHeldSnapshotDatabase();
let db: TestDatabase;
beforeAll(() => {
  db = held.current();
});

async function write(count: number, aggregates: number): Promise<void> {
  for (let done = 0; done < count; done += 500)
    await enqueueLanes(
      db.pool,
      Array.from({ length: Math.min(500, count - done) }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: `agg-${(done + i) % aggregates}`,
        payload: { n: done + i },
      })),
    );
}

const drain = () =>
  createLaneDispatcher({ executor: fromPg(db.pool), publisher: noopPublisher }).drain();

async function cursors(): Promise<{ lanes: number[]; cursors: string[] }> {
  const { rows } = await db.pool.query<{ lane: number; cursor: string }>(
    'SELECT lane, cursor::text AS cursor FROM outbox_lanes ORDER BY lane',
  );
  return { lanes: rows.map((r) => r.lane), cursors: rows.map((r) => r.cursor) };
}

async function explained(
  previous: { lanes: number[]; cursors: string[] },
  idWindow: number,
  parkedLimit = LANE_SAMPLE_PARKED_LIMIT,
): Promise<PlanNode> {
  const client = await db.pool.connect();
  try {
    return await explainAnalyze(client, laneSampleSql('public'), [
      previous.lanes,
      previous.cursors,
      idWindow,
      parkedLimit,
      LANE_COUNT,
      LATENCY_EDGES_SECONDS,
    ]);
  } finally {
    client.release();
  }
}

const outboxBlocks = (p: PlanNode): number =>
  (p['Relation Name']?.startsWith('outbox') && !p.Plans?.length ? blocksOf(p) : 0) +
  (p.Plans ?? []).reduce((sum, n) => sum + outboxBlocks(n), 0);

/** Messages the sampler counted after its first sample. */
function counted(sampler: LaneDashboardSampler): number {
  const samples = sampler.samples();
  return Math.round(
    samples.reduce((sum, p, i) => {
      const before = samples[i - 1];
      return before ? sum + ((p.publishedPerSecond ?? 0) * (p.at - before.at)) / 1000 : sum;
    }, 0),
  );
}

describe('dashboard lanes sample: bounded by a window of ids, not by what the cursors passed', () => {
  it('reads the same after the cursors moved 2,000 and 20,000 ids, and estimates the larger within 10%', async () => {
    await write(2_000, 300);
    await drain();
    const small = 1_000;
    const beforeShallow = await cursors();
    await write(2_000, 300);
    await drain();
    const shallow = await explained(beforeShallow, small);

    const beforeDeep = await cursors();
    const estimating = new LaneDashboardSampler({
      executor: fromPg(db.pool),
      schema: 'public',
      intervalMs: 60_000,
      idWindow: small,
    });
    const exact = new LaneDashboardSampler({
      executor: fromPg(db.pool),
      schema: 'public',
      intervalMs: 60_000,
    });
    await estimating.sample();
    await exact.sample();
    await write(20_000, 300);
    await drain();
    const deep = await explained(beforeDeep, small);
    const byDefault = await explained(beforeDeep, LANE_SAMPLE_ID_WINDOW);
    await estimating.sample();
    const started = performance.now();
    await exact.sample();
    const sampleMs = performance.now() - started;
    const rows = (plan: PlanNode) => rowsRead(plan, 'outbox_lane_messages');
    console.log(
      `[lane sample bound] idWindow ${small}: message rows ${rows(shallow)} -> ${rows(deep)}, outbox buffers ${outboxBlocks(shallow)} -> ${outboxBlocks(deep)}; 20,000 published counted ${counted(estimating)} (estimated); default window (${LANE_SAMPLE_ID_WINDOW}): ${rows(byDefault)} rows, ${outboxBlocks(byDefault)} buffers, counted ${counted(exact)}, sample (status read + cursors) ${sampleMs.toFixed(1)} ms`,
    );
    // The window (the lanes' windows overlap: their cursors are close), not what was passed.
    const bound = (window: number) => window + LANE_COUNT * 4;
    expect(rows(shallow)).toBeLessThanOrEqual(bound(small));
    expect(rows(deep)).toBeLessThanOrEqual(bound(small));
    expect(rows(byDefault)).toBeLessThanOrEqual(bound(LANE_SAMPLE_ID_WINDOW));
    // Ten times what the cursors passed, about the same pages.
    expect(outboxBlocks(deep)).toBeLessThan(outboxBlocks(shallow) + 4 * LANE_COUNT);
    // Not JIT-compiled (its estimate under jit_above_cost): as the status read, where
    // compiling took 40 to 140 ms of a 3 ms statement.
    const planned = await db.pool.query(`EXPLAIN (FORMAT JSON) ${laneSampleSql('public')}`, [
      beforeDeep.lanes,
      beforeDeep.cursors,
      LANE_SAMPLE_ID_WINDOW,
      LANE_SAMPLE_PARKED_LIMIT,
      LANE_COUNT,
      LATENCY_EDGES_SECONDS,
    ]);
    expect(planned.rows[0]['QUERY PLAN'][0].JIT).toBeUndefined();
    expect(Math.abs(counted(estimating) - 20_000)).toBeLessThan(2_000);
    expect(estimating.samples().at(-1)!.publishedEstimated).toBe(true);
    expect(Math.abs(counted(exact) - 20_000)).toBeLessThan(2_000);
  }, 180_000);

  it('reads at most the parked limit a lane when 5,000 wait behind a failed message', async () => {
    await drain();
    const before = await cursors();
    const sampler = new LaneDashboardSampler({
      executor: fromPg(db.pool),
      schema: 'public',
      intervalMs: 60_000,
      parkedLimit: 100,
    });
    await sampler.sample();
    await write(5_001, 1);
    await createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: {
        publish: async (m) => m.map(() => ({ status: 'retryable' as const, error: 'down' })),
      },
      backoff: { baseMs: 3_600_000, maxMs: 3_600_000, jitterMs: 0 },
    }).drain();
    const parked = await db.pool.query(`SELECT count(*)::int AS n FROM outbox_lane_parked`);
    expect(parked.rows[0].n).toBe(5_001);
    const window = 1_000;
    const plan = await explained(before, window, 100);
    const read = rowsRead(plan, 'outbox_lane_parked');
    await sampler.sample();
    console.log(
      `[lane sample bound] 5,001 parked: ${read} parked rows read (limit 100 a lane, window ${window} ids), ${outboxBlocks(plan)} buffers; counted ${counted(sampler)} published (estimated ${sampler.samples().at(-1)!.publishedEstimated})`,
    );
    // The limit + 1 behind the cursor, and the window's parked rows past the previous cursor.
    expect(read).toBeLessThanOrEqual(101 + window + LANE_COUNT * 4);
    // Nothing went out: the cursor passed them, they parked.
    expect(counted(sampler)).toBe(0);
    expect(sampler.samples().at(-1)!.publishedEstimated).toBe(true);
  }, 180_000);
});
