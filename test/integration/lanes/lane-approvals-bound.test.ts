import { beforeAll, describe, expect, it } from 'vitest';
import { approveMessages } from '../../../src/admin/approvals.js';
import type { OutboxMessage } from '../../../src/core/message.js';
import { fromPg } from '../../../src/store/from-pg.js';
import type { TestDatabase } from '../../helpers/database.js';
import { rowsRead, type PlanNode } from '../../helpers/explain.js';
import { blocksOf, useHeldSnapshotDatabase } from '../../helpers/held-snapshot.js';
import {
  drainLanes,
  explainedLaneBatch,
  outboxBlocks,
  writeLanesInCommits,
} from '../../helpers/lane-bound.js';
import { enqueueLanes } from '../../helpers/lanes.js';

/**
 * G7 with held messages on the lanes engine (migration 027): what one `outbox_lane_next` call
 * reads stays bounded by its batch beside 2,000 and 12,000 consumed messages, with held messages
 * among them still parked (each holding its aggregate's next message) and 1 in 25 of the batch
 * held, under a REPEATABLE READ snapshot held open in another connection the whole time (it
 * keeps every dead row version from vacuum). Counted with EXPLAIN (ANALYZE, BUFFERS) of every
 * statement inside the call (auto_explain, test/helpers/explain.ts), as lane-bound.test.ts does.
 */
const held = useHeldSnapshotDatabase();
let db: TestDatabase;
beforeAll(() => {
  db = held.current();
});

const BATCH = 500;

/**
 * `count` messages in transactions of 500 over 300 aggregates; every `every`-th is held, on an
 * aggregate of its own, followed by one more message of that aggregate (held behind it).
 */
async function write(count: number, every: number, prefix: string): Promise<void> {
  for (let done = 0; done < count; done += 500) {
    const messages: OutboxMessage[] = [];
    for (let i = done; i < Math.min(done + 500, count); i++) {
      if (i % every === 0) {
        messages.push(
          {
            topic: 'payment.refund',
            aggregateId: `${prefix}-h${i}`,
            payload: { i },
            requiresApproval: true,
          },
          { topic: 'payment.refund', aggregateId: `${prefix}-h${i}`, payload: { i, after: true } },
        );
        i++;
      } else
        messages.push({ topic: 'mail.send', aggregateId: `${prefix}-${i % 300}`, payload: { i } });
    }
    await enqueueLanes(db.pool, messages);
  }
}

const drain = () => drainLanes(db.pool);

/** One `outbox_lane_next` call of a batch for an owner of every lane, explained; rolled back. */
const explainedNext = () => explainedLaneBatch(db.pool, BATCH);

describe('lanes engine: held messages keep a batch to what it returns (G7)', () => {
  it('reads the same beside 2,000 and 12,000 consumed messages with held ones parked, under a held snapshot', async () => {
    await write(2_000, 50, 'old');
    await drain();
    await write(BATCH, 25, 'new');
    const shallow = await explainedNext();
    await drain();
    await write(10_000, 50, 'older');
    await drain();
    // The older ones approved and published: history too (their parked rows deleted, kept as
    // dead versions by the snapshot), beside the 2,000's held ones still parked.
    const older = await db.pool.query<{ id: string }>(
      `SELECT a.id::text AS id FROM outbox_lane_approvals a
       JOIN outbox_lane_messages m ON m.lane = a.lane AND m.id = a.id
       WHERE m.aggregate_id LIKE 'older-%'`,
    );
    expect(older.rows).toHaveLength(200);
    await approveMessages(
      fromPg(db.pool),
      older.rows.map((r) => r.id),
      { by: 'bound', engine: 'lanes' },
    );
    await drain();
    await write(BATCH, 25, 'newer');
    const deep = await explainedNext();
    const parked = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM outbox_lane_parked WHERE available_at = 'infinity'`,
    );
    const byRelation = (p: PlanNode, into: Record<string, number> = {}) => {
      const key = `${p['Relation Name'] ?? ''}/${(p as { 'Index Name'?: string })['Index Name'] ?? ''}`;
      if (p['Relation Name'] && !p.Plans?.length) into[key] = (into[key] ?? 0) + blocksOf(p);
      for (const n of p.Plans ?? []) byRelation(n, into);
      return into;
    };
    if (process.env.LANES_DEBUG)
      console.log(JSON.stringify(byRelation(shallow.plan)), JSON.stringify(byRelation(deep.plan)));
    const messages = (p: PlanNode) => rowsRead(p, 'outbox_lane_messages');
    const decisions = (p: PlanNode) => rowsRead(p, 'outbox_lane_approvals');
    console.log(
      `[lanes approvals bound] ${parked.rows[0]!.n} held parked; outbox buffers ${outboxBlocks(shallow.plan)} -> ${outboxBlocks(deep.plan)}, all ${blocksOf(shallow.plan)} -> ${blocksOf(deep.plan)}, message rows read ${messages(shallow.plan)} -> ${messages(deep.plan)}, decision rows read ${decisions(shallow.plan)} -> ${decisions(deep.plan)}, returned ${shallow.returned} -> ${deep.returned}`,
    );
    // 1 in 25 of each batch held, and its aggregate's next message behind it: neither returned.
    expect(shallow.returned).toBe(BATCH - 2 * (BATCH / 25));
    expect(deep.returned).toBe(shallow.returned);
    // Held messages parked earlier (and what waits behind them) are not read again: the batch's
    // rows, and the delayed index's probes up to the batch.
    expect(messages(deep.plan)).toBeLessThanOrEqual(3 * BATCH);
    expect(messages(deep.plan) - messages(shallow.plan)).toBeLessThanOrEqual(BATCH / 10);
    // One decision probe per held message the batch reaches, whatever was held before.
    expect(decisions(deep.plan)).toBeLessThanOrEqual(BATCH / 25);
    expect(decisions(shallow.plan)).toBe(decisions(deep.plan));
    // What grows is per batch consumed (the lane rows' versions the snapshot keeps: under 2
    // pages a batch, as in lane-bound.test.ts), and one index level more a probe: each row read
    // in a lane with a parked aggregate probes the parked blocks index, each held one its
    // decision and parked keys, and those indexes are a level deeper with the dead entries the
    // snapshot keeps (measured: 625 -> 1,230 buffers, +506 of them the blocks index for ~500
    // probes). Logarithmic in history, never a walk of it: the rows read stay the same.
    const batches = 12_000 / BATCH;
    expect(outboxBlocks(deep.plan) - outboxBlocks(shallow.plan)).toBeLessThan(
      2 * batches + 1.25 * messages(deep.plan),
    );
  }, 180_000);

  it('a message without approval costs the read nothing more: no decision is probed', async () => {
    await drain();
    await writeLanesInCommits(db.pool, BATCH, 250, (n) => ({
      topic: 'mail.send',
      aggregateId: `plain-${n % 100}`,
      payload: { i: n },
    }));
    const { plan, returned } = await explainedNext();
    expect(returned).toBe(BATCH);
    // Not a row and not a page of the decisions (a probe that finds nothing still reads one).
    const decisionBlocks = (p: PlanNode): number =>
      (p['Relation Name'] === 'outbox_lane_approvals' ? blocksOf(p) : 0) +
      (p.Plans ?? []).reduce((sum, n) => sum + decisionBlocks(n), 0);
    expect(decisionBlocks(plan)).toBe(0);
    expect(rowsRead(plan, 'outbox_lane_approvals')).toBe(0);
  }, 60_000);
});
