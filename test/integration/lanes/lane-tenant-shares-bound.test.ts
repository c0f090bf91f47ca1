import { beforeAll, describe, expect, it } from 'vitest';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import type { TestDatabase } from '../../helpers/database.js';
import { rowsRead, type PlanNode } from '../../helpers/explain.js';
import { blocksOf, noopPublisher, useHeldSnapshotDatabase } from '../../helpers/held-snapshot.js';
import { drainLanes, explainLaneNext, writeLanesInCommits } from '../../helpers/lane-bound.js';

/**
 * G7 for tenant shares (migration 028, sql/lane-tenant-shares.ts): what a full batch's
 * `outbox_lane_next` call reads, shares included, does not grow with tenant A's backlog (5,000
 * -> 20,000 waiting), with history (40,000 tenanted messages of 400 tenants seen before,
 * consumed; half of them pruned), nor under a REPEATABLE READ snapshot held open the whole time
 * (the pruned rows and the forgotten `outbox_lane_ahead` rows stay as dead versions). Counted
 * with EXPLAIN (ANALYZE, BUFFERS) of every statement inside the call (auto_explain).
 */
const held = useHeldSnapshotDatabase();
let db: TestDatabase;
beforeAll(() => {
  db = held.current();
});

const BATCH = 500;

/** `count` messages of `tenant(n)` on `aggregates` aggregates, in commits of 1,000. */
const write = (count: number, aggregates: number, prefix: string, tenant: (n: number) => string) =>
  writeLanesInCommits(db.pool, count, 1_000, (n) => ({
    topic: 'mail.send',
    aggregateId: `${prefix}-${n % aggregates}`,
    payload: { n },
    tenantId: tenant(n),
  }));

const drain = () => drainLanes(db.pool);

/** One full batch's call with shares for an owner of every lane, explained; rolled back. */
async function explainedNext(): Promise<{ plan: PlanNode; returned: number; shares: number }> {
  // Each lane's tenant cursor at A, as a running dispatcher's comes round to it: B is next (the
  // stale tenants of the history sort before A; a cursor passes them TENANT_HOPS at a time).
  const lanes = Array.from({ length: 16 }, (_, i) => i);
  const call = `SELECT * FROM outbox_lane_next('explained', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', true, ${BATCH}, 0::smallint, 60000, 0, 0, 0, false, '{${lanes}}', '{${lanes.map(() => 0)}}', '{}', '{}', '{${lanes.map(() => 'tenant-a')}}')`;
  const { plan, rows } = await explainLaneNext<{ lane: number; message_id: string | null }>(
    db.pool,
    call,
  );
  const marker = rows.findIndex((r) => r.lane === -2);
  const messages = (from: number, to: number) =>
    rows.slice(from, to).filter((r) => r.message_id !== null).length;
  return {
    plan,
    returned: messages(0, marker < 0 ? rows.length : marker),
    shares: marker < 0 ? 0 : messages(marker + 1, rows.length),
  };
}

/** Tenanted history: `count` messages of `tenants` tenants, consumed; the first half pruned. */
async function history(count: number, tenants: number, prefix: string): Promise<number> {
  await write(count / 2, count / 20, prefix, (n) => `${prefix}-tenant-${n % tenants}`);
  await drain();
  const pruned = await db.pool.query<{ n: string }>('SELECT outbox_lane_prune(0, 1000000) AS n');
  await write(count / 2, count / 20, `${prefix}2`, (n) => `${prefix}-tenant-${n % tenants}`);
  await drain();
  return Number(pruned.rows[0]!.n);
}

/** Rounds of A's burst beside B's trickle, drained with shares: outbox_lane_ahead churns. */
async function rounds(n: number, prefix: string): Promise<void> {
  for (let round = 0; round < n; round++) {
    await write(2_000, 500, `${prefix}a${round}`, () => 'tenant-a');
    await write(32, 16, `${prefix}b${round}`, () => 'tenant-b');
    await createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: noopPublisher,
      batchSize: 50,
    }).drain();
  }
}

/** Buffers by relation/index of `p`'s leaves. */
function byRelation(p: PlanNode, into = new Map<string, number>()): Map<string, number> {
  const n = p as PlanNode & { 'Index Name'?: string };
  if (n['Relation Name'] && !p.Plans?.length) {
    const key = `${n['Relation Name']}/${n['Index Name'] ?? '-'}`;
    into.set(key, (into.get(key) ?? 0) + blocksOf(p));
  }
  for (const c of p.Plans ?? []) byRelation(c, into);
  return into;
}

describe('lanes engine: tenant shares read what they return (G7)', () => {
  it("reads the same beside A's backlog x4, twice the tenanted history (pruned and not) and under a held snapshot", async () => {
    await db.pool.query('CREATE EXTENSION IF NOT EXISTS pageinspect');
    const height = async () =>
      (
        await db.pool.query<{ level: number }>(
          `SELECT level::int AS level FROM bt_metap('outbox_lane_messages_tenant_idx')`,
        )
      ).rows[0]!.level + 1;
    console.log(`[lane shares bound] tenant index height ${await height()}`);
    // No history: A's backlog of 5,000 (every lane), then B's trickle, 32 on 16 aggregates.
    await write(5_000, 500, 'a', () => 'tenant-a');
    await write(32, 16, 'b', () => 'tenant-b');
    const fresh = await explainedNext();
    await drain();
    // History: 400 tenants, 20,000 messages, 10,000 pruned (dead under the snapshot); shares
    // that went ahead and were forgotten.
    expect(await history(20_000, 400, 'h1')).toBeGreaterThan(9_000);
    await rounds(2, 'r1');
    // (B's aggregates new each time: a predecessor pruned by retention is not found, and its
    // successor waits for the cursor, sql/lane-tenant-shares.ts.)
    await write(5_000, 500, 'a1', () => 'tenant-a');
    await write(32, 16, 'b1', () => 'tenant-b');
    const shallow = await explainedNext();
    console.log(`[lane shares bound] tenant index height ${await height()}`);
    await drain();
    // Twice as much again: 800 more tenants, 40,000 messages, half pruned; more shares gone.
    expect(await history(40_000, 800, 'h2')).toBeGreaterThan(19_000);
    await rounds(3, 'r2');
    // A's backlog four times deeper, and B's trickle after it.
    await write(20_000, 500, 'a2', () => 'tenant-a');
    await write(32, 16, 'b2', () => 'tenant-b');
    const deep = await explainedNext();
    const rows = (p: PlanNode) => rowsRead(p, 'outbox_lane_messages');
    const blocks = (p: PlanNode, but = 'outbox_lanes/') =>
      [...byRelation(p)].reduce((sum, [key, n]) => (key.startsWith(but) ? sum : sum + n), 0);
    const laneRowBlocks = (p: PlanNode) => byRelation(p).get('outbox_lanes/outbox_lanes_pkey') ?? 0;
    console.log(
      `[lane shares bound] returned ${fresh.returned}+${fresh.shares} / ${shallow.returned}+${shallow.shares} / ${deep.returned}+${deep.shares}; message rows read ${rows(fresh.plan)} / ${rows(shallow.plan)} / ${rows(deep.plan)}; outbox buffers but the lane rows ${blocks(fresh.plan)} / ${blocks(shallow.plan)} / ${blocks(deep.plan)}, lane rows ${laneRowBlocks(fresh.plan)} / ${laneRowBlocks(shallow.plan)} / ${laneRowBlocks(deep.plan)}; all ${blocksOf(fresh.plan)} / ${blocksOf(shallow.plan)} / ${blocksOf(deep.plan)}`,
    );
    for (const call of [fresh, shallow, deep]) {
      expect(call.returned).toBe(BATCH);
      // B's messages went out as shares (32 within half a batch).
      expect(call.shares).toBe(32);
    }
    // The batch, the shares, and the tenants a call may look at (TENANT_VISITS): not A's
    // backlog, not history.
    expect(rows(deep.plan)).toBeLessThanOrEqual(2 * BATCH);
    expect(rows(deep.plan) - rows(shallow.plan)).toBeLessThanOrEqual(BATCH / 10);
    // Buffers: the same but for the dead lane-row versions the snapshot keeps (lane-bound.test.ts:
    // up to 2 pages a batch consumed, here ~1,600 batches) and the tenant index's next level
    // (90,000 entries against 30,000: a buffer more for each of a call's ~400 descents of it),
    // not a walk of the 40,000 consumed or the 20,000 pruned.
    expect(blocks(deep.plan) - blocks(shallow.plan)).toBeLessThan(600);
    console.log(`[lane shares bound] tenant index height ${await height()}`);
    expect(laneRowBlocks(deep.plan)).toBeLessThan(2 * 1_600);
  }, 600_000);
});
