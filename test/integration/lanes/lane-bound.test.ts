import { beforeAll, describe, expect, it } from 'vitest';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import type { OutboxMessage } from '../../../src/core/message.js';
import type { TestDatabase } from '../../helpers/database.js';
import { rowsRead, type PlanNode } from '../../helpers/explain.js';
import { blocksOf, useHeldSnapshotDatabase } from '../../helpers/held-snapshot.js';
import {
  drainLanes,
  explainedLaneBatch,
  outboxBlocks,
  writeLanesInCommits,
} from '../../helpers/lane-bound.js';

/**
 * G7 on the lanes engine (issue 43): what one `outbox_lane_next` call reads is bounded by its
 * batch — not by the history consumed before it, under a REPEATABLE READ snapshot held open the
 * whole time (it keeps every dead row version from vacuum), and not by a parked aggregate's deep
 * backlog. Counted with EXPLAIN (ANALYZE, BUFFERS) of every statement inside the call
 * (auto_explain, test/helpers/explain.ts), at two depths of history, so growth fails the test.
 */
const held = useHeldSnapshotDatabase();
let db: TestDatabase;
beforeAll(() => {
  db = held.current();
});

const BATCH = 500;

/**
 * `count` messages in transactions of 500, spread over `aggregates` aggregates; `extra(n)` adds
 * to the n-th message (a delay).
 */
const write = (
  count: number,
  aggregates: number,
  prefix = 'agg',
  extra: (n: number) => Partial<OutboxMessage> = () => ({}),
) =>
  writeLanesInCommits(db.pool, count, 500, (n) => ({
    topic: 'mail.send',
    aggregateId: `${prefix}-${n % aggregates}`,
    payload: { n },
    ...extra(n),
  }));

const drain = () => drainLanes(db.pool);

/** One `outbox_lane_next` call of a batch for an owner of every lane, explained; rolled back. */
const explainedNext = () => explainedLaneBatch(db.pool, BATCH);

describe('lanes engine: a batch reads what it returns (G7)', () => {
  it('reads the same beside 2,000 and 22,000 messages consumed under a held snapshot', async () => {
    await write(2_000, 300);
    await drain();
    await write(BATCH, 300);
    const shallow = await explainedNext();
    await drain();
    await write(20_000, 300);
    await drain();
    await write(BATCH, 300);
    const deep = await explainedNext();
    expect(shallow.returned).toBe(BATCH);
    expect(deep.returned).toBe(BATCH);
    const rows = (p: PlanNode) => rowsRead(p, 'outbox_lane_messages');
    // Buffers of the outbox's tables (the horizon's activity probe, when a transaction elsewhere
    // fails its cheap test, reads catalogs: not history, and it varies with the machine).
    const lanesBlocks = (p: PlanNode): number =>
      (p['Relation Name'] === 'outbox_lanes' ? blocksOf(p) : 0) +
      (p.Plans ?? []).reduce((sum, n) => sum + lanesBlocks(n), 0);
    console.log(
      `[lanes bound] outbox buffers ${outboxBlocks(shallow.plan)} -> ${outboxBlocks(deep.plan)} (outbox_lanes ${lanesBlocks(shallow.plan)} -> ${lanesBlocks(deep.plan)}), all ${blocksOf(shallow.plan)} -> ${blocksOf(deep.plan)}, message rows read ${rows(shallow.plan)} -> ${rows(deep.plan)}`,
    );
    // Only the batch's rows: the lanes start at their cursors (dead versions are below them).
    expect(rows(deep.plan)).toBeLessThanOrEqual(BATCH);
    // What does grow is per BATCH, not per message: each batch moves up to 16 lane rows, and the
    // snapshot keeps every old version, which the reads of outbox_lanes scan (measured: 3 -> 47
    // pages after 40 more batches; docs/lanes.md). Bounded here at 2 pages a batch consumed; a
    // walk of the history the claim engine once did would read thousands.
    const batches = 20_000 / BATCH;
    expect(outboxBlocks(deep.plan) - outboxBlocks(shallow.plan)).toBeLessThan(2 * batches);
  }, 180_000);

  it('delays (migration 026): reads the same beside 2,000 and 22,000 delayed messages consumed, with messages not due waiting', async () => {
    await drain();
    // Delayed messages, due by the time they are read: each is in the delayed index for good
    // (until retention), and what the call probes of that index must not grow with them.
    const due = () => ({ availableAt: new Date(Date.now() - 60_000) });
    // A batch with one message of 25 not due for an hour, each then parked by the read (of an
    // aggregate of its own: the later ones of an aggregate would park behind it, G4, and this
    // case is about the delayed index, not parked aggregates).
    let waiting = 0;
    const mixed = (n: number) =>
      n % 25 === 0 ? { aggregateId: `wait-${waiting++}`, delayMs: 3_600_000 } : due();
    await write(2_000, 300, 'late', due);
    await drain();
    await write(BATCH, 300, 'late', mixed);
    const shallow = await explainedNext();
    await drain();
    await write(20_000, 300, 'late', due);
    await drain();
    await write(BATCH, 300, 'late', mixed);
    const deep = await explainedNext();
    const rows = (p: PlanNode) => rowsRead(p, 'outbox_lane_messages');
    console.log(
      `[lanes bound] delayed: outbox buffers ${outboxBlocks(shallow.plan)} -> ${outboxBlocks(deep.plan)}, all ${blocksOf(shallow.plan)} -> ${blocksOf(deep.plan)}, message rows read ${rows(shallow.plan)} -> ${rows(deep.plan)}, returned ${shallow.returned} -> ${deep.returned}`,
    );
    // What is not due is parked, not returned; the rest is.
    expect(deep.returned).toBe(BATCH - BATCH / 25);
    expect(shallow.returned).toBe(BATCH - BATCH / 25);
    // The batch's rows, each lane's delayed rows probed up to the batch (at most twice the
    // batch), and the parked lookups of delayed rows: not the 20,000 consumed before.
    expect(rows(deep.plan)).toBeLessThanOrEqual(3 * BATCH);
    expect(rows(deep.plan) - rows(shallow.plan)).toBeLessThanOrEqual(BATCH / 10);
    const batches = 20_000 / BATCH;
    expect(outboxBlocks(deep.plan) - outboxBlocks(shallow.plan)).toBeLessThan(2 * batches);
  }, 180_000);

  it('reads at most 4 × batch rows of a lane with a parked aggregate whatever waits behind it', async () => {
    await drain();
    // One aggregate fails and parks; 5,000 of its messages wait in its lane.
    const poison = 'poison-0';
    await write(1, 1, 'poison');
    await createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: {
        publish: async (m) => m.map(() => ({ status: 'retryable' as const, error: 'down' })),
      },
      backoff: { baseMs: 3_600_000, maxMs: 3_600_000, jitterMs: 0 },
    }).drain();
    const parked = await db.pool.query(
      `SELECT count(*)::int AS n FROM outbox_lane_parked WHERE aggregate_id = $1`,
      [poison],
    );
    expect(parked.rows[0].n).toBe(1);
    await write(5_000, 1, 'poison');
    const { plan } = await explainedNext();
    const read = rowsRead(plan, 'outbox_lane_messages');
    if (process.env.LANES_DEBUG) console.log(JSON.stringify(plan, null, 1));
    console.log(
      `[lanes bound] parked aggregate with 5,000 behind: ${read} message rows read, ${blocksOf(plan)} buffers`,
    );
    expect(read).toBeLessThanOrEqual(4 * BATCH + 2 * BATCH);
    expect(read).toBeGreaterThan(0);
  }, 180_000);
});
