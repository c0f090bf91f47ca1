import type pg from 'pg';
import { createLaneDispatcher, fromPg, type OutboxMessage } from '../../src/index.js';
import { laneLeaveSql } from '../../src/sql/lanes.js';
import { explainAnalyze, type PlanNode } from './explain.js';
import { blocksOf, noopPublisher } from './held-snapshot.js';
import { enqueueLanes } from './lanes.js';

/**
 * What the lanes engine's bound tests (test/integration/lanes/*-bound.test.ts: what a read costs
 * beside a deep history under a held snapshot, helpers/held-snapshot.ts) share: writing in
 * commits, draining, explaining one `outbox_lane_next` call, counting the outbox's buffers.
 */

/**
 * `count` messages with the lanes writer, `perCommit` to a transaction; `message(n)` is the
 * n-th.
 */
export async function writeLanesInCommits(
  pool: pg.Pool,
  count: number,
  perCommit: number,
  message: (n: number) => OutboxMessage,
): Promise<void> {
  for (let done = 0; done < count; done += perCommit)
    await enqueueLanes(
      pool,
      Array.from({ length: Math.min(perCommit, count - done) }, (_, i) => message(done + i)),
    );
}

/** Publishes everything due on the lanes with a no-op publisher. */
export const drainLanes = (pool: pg.Pool) =>
  createLaneDispatcher({ executor: fromPg(pool), publisher: noopPublisher }).drain();

/** Buffers the plan's leaves on the outbox's tables and indexes touched (not the catalogs'). */
export const outboxBlocks = (p: PlanNode): number =>
  (p['Relation Name']?.startsWith('outbox') && !p.Plans?.length ? blocksOf(p) : 0) +
  (p.Plans ?? []).reduce((sum, n) => sum + outboxBlocks(n), 0);

/**
 * `call`, an `outbox_lane_next('explained', ...)` call for an owner of every lane, explained and
 * then run again for its rows; both rolled back. The lanes are taken first, committed (the
 * call's horizon must run before its transaction writes), and given back after.
 *
 * The lane tables are analyzed first, as autovacuum has them in production: the plans are
 * those of tables with statistics, every time. Without, a test read whichever plans the
 * statistics of the moment gave (none, or autovacuum's when it came by during a long suite): a
 * probe the planner hashes once it has statistics walked the parked table's whole history
 * (migration 037) in one run of the suite in many and never alone.
 */
export async function explainLaneNext<R>(
  pool: pg.Pool,
  call: string,
): Promise<{ plan: PlanNode; rows: R[] }> {
  await pool.query(
    'ANALYZE outbox_lanes, outbox_lane_messages, outbox_lane_parked, outbox_lane_ahead, outbox_lane_approvals',
  );
  await pool.query(`SELECT * FROM outbox_lane_balance('explained', 60000, 16)`);
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const plan = await explainAnalyze(client, call);
    await client.query('ROLLBACK');
    await client.query('BEGIN');
    const { rows } = await client.query<R & pg.QueryResultRow>(call);
    return { plan, rows };
  } finally {
    await client.query('ROLLBACK');
    client.release();
    await pool.query(laneLeaveSql('public'), ['explained']);
  }
}

/** One plain `outbox_lane_next` call of a `batch` (no tenants), explained: what it returned. */
export async function explainedLaneBatch(
  pool: pg.Pool,
  batch: number,
): Promise<{ plan: PlanNode; returned: number }> {
  const { plan, rows } = await explainLaneNext<{ message_id: string | null }>(
    pool,
    `SELECT * FROM outbox_lane_next('explained', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', true, ${batch}, 0::smallint, 60000, 0, 0, 0, false, '{}', '{}')`,
  );
  return { plan, returned: rows.filter((r) => r.message_id).length };
}
