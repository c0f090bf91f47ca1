import type { BenchDatabase } from '../lib/database.js';
import { log } from '../lib/measure.js';
import { rate } from './dispatch.js';

/**
 * Where `dispatch_vs_pg_boss` stops, on our own table. Our dispatcher and the raw claim+mark loop
 * of dispatch_vs_raw_sql (the least a lease dispatcher does per batch) run again with parts of
 * the outbox taken away (an unordered topic, so no claim needs them), and the raw loop once as
 * the design SPEC §4.4 rules out:
 * - `withoutMessageIdIndex`: the `UNIQUE (message_id)` constraint dropped (ids then unique only
 *   by construction, and nothing finds a message by its id quickly);
 * - `keyAndPendingOnly`: that, the per-aggregate head index (ordered topics would then scan for
 *   every head check) and the retention index on `dispatched_at` (migration 006) dropped: only
 *   what an unordered claim reads. The raw loop only: our claim's head check is planned as an
 *   anti-join over the whole outbox without the head index, even for unordered topics (1.4k
 *   rows/s in the one run that tried).
 * - `lockHeldAcrossPublish`: every index kept, but the rows are locked by a transaction held
 *   open across the publish and marked in it (dispatch.ts, `lockHeldLoop`): one write per row
 *   instead of two.
 * The full table's loop is `perSecond.rawSql` of the peers case. Each variant over pg-boss says
 * what a dispatcher without that part could reach; the lease (a claim that survives a crash and
 * counts the attempt) is the part §4.4 requires.
 */
export interface LeaseCost {
  withoutMessageIdIndex: number;
  keyAndPendingOnly: number;
  oursWithoutMessageIdIndex: number;
  lockHeldAcrossPublish: number;
}

const DROP = {
  messageId: 'ALTER TABLE outbox DROP CONSTRAINT outbox_message_id_key',
  heads: 'DROP INDEX outbox_aggregate_pending_idx',
  retention: 'DROP INDEX outbox_dispatched_at_idx',
};
// As migrations 001 (message id, heads) and 006 (retention) create them.
const RESTORE = {
  messageId: 'ALTER TABLE outbox ADD CONSTRAINT outbox_message_id_key UNIQUE (message_id)',
  heads: `CREATE INDEX outbox_aggregate_pending_idx ON outbox (aggregate_id, sequence)
  WHERE dispatched_at IS NULL`,
  retention: `CREATE INDEX outbox_dispatched_at_idx ON outbox (dispatched_at)
  WHERE dispatched_at IS NOT NULL`,
};

async function without(
  db: BenchDatabase,
  parts: (keyof typeof DROP)[],
  who: 'raw' | 'ours',
  count: number,
): Promise<number> {
  for (const part of parts) await db.pool.query(DROP[part]);
  try {
    return await rate(db, who, count, false);
  } finally {
    // Later cases run on this table: put it back even when the loop failed.
    for (const part of parts) await db.pool.query(RESTORE[part]);
  }
}

/** Best of `rounds` alternated runs of each variant, rows/s. */
export async function leaseCost(
  db: BenchDatabase,
  count: number,
  rounds: number,
): Promise<LeaseCost> {
  const best: LeaseCost = {
    withoutMessageIdIndex: 0,
    keyAndPendingOnly: 0,
    oursWithoutMessageIdIndex: 0,
    lockHeldAcrossPublish: 0,
  };
  const keep = (key: keyof LeaseCost, value: number) => (best[key] = Math.max(best[key], value));
  const stripped: (keyof typeof DROP)[] = ['messageId', 'heads', 'retention'];
  for (let r = 0; r < rounds; r++) {
    keep('withoutMessageIdIndex', await without(db, ['messageId'], 'raw', count));
    keep('oursWithoutMessageIdIndex', await without(db, ['messageId'], 'ours', count));
    keep('keyAndPendingOnly', await without(db, stripped, 'raw', count));
    keep('lockHeldAcrossPublish', await rate(db, 'lockHeld', count, false));
  }
  const rounded = Object.fromEntries(
    Object.entries(best).map(([key, value]) => [key, Math.round(value)]),
  ) as unknown as LeaseCost;
  log(
    `on our table without the message-id index: raw claim+mark ${rounded.withoutMessageIdIndex} rows/s, ours ${rounded.oursWithoutMessageIdIndex}; primary key + pending index only: raw ${rounded.keyAndPendingOnly}; row locks held across the publish (ruled out by SPEC §4.4) ${rounded.lockHeldAcrossPublish}`,
  );
  return rounded;
}
