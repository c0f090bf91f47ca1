import { beforeAll, describe, expect, it } from 'vitest';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import {
  LANE_STATUS_ID_WINDOW,
  readLaneEngineStatus,
} from '../../../src/lanes/lane-engine-status.js';
import { LANE_COUNT } from '../../../src/migrations/024-lanes.js';
import { laneEngineStatusSql } from '../../../src/sql/lane-admin.js';
import { fromPg } from '../../../src/store/from-pg.js';
import type { TestDatabase } from '../../helpers/database.js';
import { explainAnalyze, rowsRead, type PlanNode } from '../../helpers/explain.js';
import { useHeldSnapshotDatabase } from '../../helpers/held-snapshot.js';
import { drainLanes, outboxBlocks, writeLanesInCommits } from '../../helpers/lane-bound.js';
import { enqueueLanes } from '../../helpers/lanes.js';

/**
 * The lanes engine's status read (the Prometheus gauges and /healthz run it every 15 s in every
 * dispatcher that serves metrics) reads a window of `idWindow` ids after the lane cursors,
 * whatever the backlog, under a REPEATABLE READ snapshot held open the whole time: counted with EXPLAIN
 * (ANALYZE, BUFFERS) at a backlog of 2,000 and of 22,000, so growth with the backlog fails.
 */
const held = useHeldSnapshotDatabase();
let db: TestDatabase;
beforeAll(() => {
  db = held.current();
});

const write = (count: number, aggregates: number) =>
  writeLanesInCommits(db.pool, count, 500, (n) => ({
    topic: 'mail.send',
    aggregateId: `agg-${n % aggregates}`,
    payload: { n },
  }));

async function explained(idWindow: number): Promise<PlanNode> {
  const client = await db.pool.connect();
  try {
    return await explainAnalyze(client, laneEngineStatusSql('public'), [idWindow, LANE_COUNT]);
  } finally {
    client.release();
  }
}

const messageRows = (plan: PlanNode) => rowsRead(plan, 'outbox_lane_messages');

describe('lanes engine status: bounded by a window of ids, not by the backlog', () => {
  it('reads the same at a backlog of 2,000 and of 22,000, and estimates the larger within 10%', async () => {
    // History consumed first (the cursors are not at 0), under the held snapshot.
    await write(2_000, 300);
    await drainLanes(db.pool);

    await write(2_000, 300);
    const exact = await readLaneEngineStatus(fromPg(db.pool));
    expect(exact).toMatchObject({ backlog: 2_000, dueNow: 2_000, backlogEstimated: false });
    expect(
      (await readLaneEngineStatus(fromPg(db.pool), { idWindow: 1_000 })).backlogEstimated,
    ).toBe(true);
    const small = 1_000; // ids: both backlogs reach past it
    const shallow = await explained(small);

    await write(20_000, 300);
    const deep = await explained(small);
    const estimated = await readLaneEngineStatus(fromPg(db.pool), { idWindow: small });
    await readLaneEngineStatus(fromPg(db.pool)); // warm: the time below is a refresh's
    const started = performance.now();
    const byDefault = await readLaneEngineStatus(fromPg(db.pool));
    const defaultMs = performance.now() - started;
    const defaultPlan = await explained(LANE_STATUS_ID_WINDOW);
    console.log(
      `[lane status bound] idWindow ${small}: message rows ${messageRows(shallow)} -> ${messageRows(deep)}, outbox buffers ${outboxBlocks(shallow)} -> ${outboxBlocks(deep)}; backlog 22,000 estimated ${estimated.backlog}; default (${LANE_STATUS_ID_WINDOW}): ${byDefault.backlog} (estimated ${byDefault.backlogEstimated}), ${messageRows(defaultPlan)} rows, ${defaultMs.toFixed(1)} ms`,
    );
    // The window (the lanes' windows overlap: their cursors are close), and the first and last
    // message of each lane: not the backlog.
    const bound = (window: number) => window + LANE_COUNT * 4;
    expect(messageRows(shallow)).toBeLessThanOrEqual(bound(small));
    expect(messageRows(deep)).toBeLessThanOrEqual(bound(small));
    expect(messageRows(defaultPlan)).toBeLessThanOrEqual(bound(LANE_STATUS_ID_WINDOW));
    // Ten times the backlog, about the same pages (an index page or two a lane further on).
    expect(outboxBlocks(deep)).toBeLessThan(outboxBlocks(shallow) + 4 * LANE_COUNT);
    // Not JIT-compiled (its estimate under jit_above_cost): compiling took 40 to 140 ms of it.
    const planned = await db.pool.query(`EXPLAIN (FORMAT JSON) ${laneEngineStatusSql('public')}`, [
      LANE_STATUS_ID_WINDOW,
      LANE_COUNT,
    ]);
    expect(planned.rows[0]['QUERY PLAN'][0].JIT).toBeUndefined();
    for (const status of [estimated, byDefault]) {
      expect(status.backlogEstimated).toBe(true);
      expect(Math.abs(status.backlog - 22_000)).toBeLessThan(2_200);
      expect(status.dueNow).toBe(status.backlog);
    }
  }, 180_000);

  it('reads a window of the parked rows when 5,000 wait behind a failed message', async () => {
    await drainLanes(db.pool);
    const failing = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: {
        publish: async (m) => m.map(() => ({ status: 'retryable' as const, error: 'down' })),
      },
      backoff: { baseMs: 3_600_000, maxMs: 3_600_000, jitterMs: 0 },
    });
    await write(5_001, 1);
    await failing.drain();
    const parked = await db.pool.query(`SELECT count(*)::int AS n FROM outbox_lane_parked`);
    expect(parked.rows[0].n).toBe(5_001);
    const window = 1_000;
    const plan = await explained(window);
    const status = await readLaneEngineStatus(fromPg(db.pool), { idWindow: window });
    const read = rowsRead(plan, 'outbox_lane_parked');
    console.log(
      `[lane status bound] 5,001 parked: ${read} parked rows read, backlog ${status.backlog} (estimated ${status.backlogEstimated}), scheduled ${status.scheduled}`,
    );
    expect(read).toBeLessThanOrEqual(2 * window + LANE_COUNT * 4);
    expect(status.backlogEstimated).toBe(true);
    expect(Math.abs(status.backlog - 5_001)).toBeLessThan(500);
    expect(status.dueNow).toBe(0);
    // Exact with the default window: 5,001 ids.
    expect(await readLaneEngineStatus(fromPg(db.pool))).toMatchObject({
      backlog: 5_001,
      scheduled: 1,
      dueNow: 0,
      backlogEstimated: false,
    });
  }, 180_000);

  it('counts what parks behind a dead letter written long before (hold): the window starts after it', async () => {
    await drainLanes(db.pool);
    await db.pool.query('TRUNCATE outbox_lane_parked');
    // A dead letter of one aggregate; then 3,000 messages of others go out (ids move on); then
    // 2,000 of the dead letter's aggregate park behind it, far past it in ids.
    const refuse = (aggregate: string) =>
      createLaneDispatcher({
        executor: fromPg(db.pool),
        publisher: {
          publish: async (m) =>
            m.map((x) =>
              x.aggregateId === aggregate
                ? { status: 'permanent' as const, error: 'refused' }
                : { status: 'published' as const },
            ),
        },
        deadLetterPolicy: 'hold',
      }).drain();
    await enqueueLanes(db.pool, [{ topic: 'mail.send', aggregateId: 'dead-0', payload: {} }]);
    await refuse('dead-0');
    await write(3_000, 300);
    await refuse('dead-0');
    await enqueueLanes(
      db.pool,
      Array.from({ length: 2_000 }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: 'dead-0',
        payload: { i },
      })),
    );
    await refuse('dead-0');
    const { rows } = await db.pool.query(
      `SELECT count(*) FILTER (WHERE dead_at IS NULL)::int AS waiting,
              count(*) FILTER (WHERE dead_at IS NOT NULL)::int AS dead FROM outbox_lane_parked`,
    );
    expect(rows[0]).toEqual({ waiting: 2_000, dead: 1 });
    const status = await readLaneEngineStatus(fromPg(db.pool), { idWindow: 1_000 });
    console.log(
      `[lane status bound] 2,000 behind a dead letter: backlog ${status.backlog} (estimated ${status.backlogEstimated}), dead ${status.deadLetters}`,
    );
    expect(status.deadLetters).toBe(1);
    expect(Math.abs(status.backlog - 2_000)).toBeLessThan(200);
    expect(rowsRead(await explained(1_000), 'outbox_lane_parked')).toBeLessThanOrEqual(
      2 * 1_000 + LANE_COUNT * 4,
    );
    expect(await readLaneEngineStatus(fromPg(db.pool))).toMatchObject({
      backlog: 2_000,
      dueNow: 0,
      deadLetters: 1,
      backlogEstimated: false,
    });
  }, 180_000);
});
