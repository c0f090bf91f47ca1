import { describe, expect, it } from 'vitest';
import { nextDueSql } from '../../../src/sql/fleet.js';
import { explainAnalyze } from '../../helpers/explain.js';
import {
  blocksOf,
  drainNoop,
  insertMessages,
  useHeldSnapshotDatabase,
} from '../../helpers/held-snapshot.js';

/**
 * Fleet mode asks an idle tenant when its next message becomes due (`nextDueSql`) instead of
 * polling it. That read must not grow with what was dispatched while a REPEATABLE READ snapshot is
 * held open (the dead index entries vacuum cannot take): its buffers are counted with
 * EXPLAIN (ANALYZE, BUFFERS) after 10,000 and after 40,000 dispatched under the snapshot, with one
 * message backing off so the read has a row to find.
 */
const held = useHeldSnapshotDatabase();

/** The read, explained, with one message due in about a minute (a retry's backoff). */
async function explainNextDue() {
  await held.current().pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload, available_at)
     VALUES ('later', 'payment.charge', '{}', now() + interval '1 minute')`,
  );
  const client = await held.current().pool.connect();
  try {
    const plan = await explainAnalyze(client, nextDueSql('public'), []);
    const { rows } = await client.query<{ inMs: number }>(nextDueSql('public'));
    return { blocks: blocksOf(plan), inMs: rows[0]!.inMs };
  } finally {
    client.release();
    await held.current().pool.query(`DELETE FROM outbox WHERE aggregate_id = 'later'`);
  }
}

describe('fleet: when an idle tenant is next due, under a held REPEATABLE READ snapshot', () => {
  it('reads the same buffers after 10,000 and after 40,000 dispatched', async () => {
    const at: Record<number, { blocks: number; inMs: number }> = {};
    for (const total of [10_000, 40_000]) {
      const more = total - (at[10_000] ? 10_000 : 0);
      await insertMessages(held.current().pool, more);
      expect(await drainNoop(held.current().pool, 500)).toBe(more);
      at[total] = await explainNextDue();
    }
    const why = JSON.stringify(at);
    console.log(`fleet next-due read under the held snapshot: ${why}`);
    for (const total of [10_000, 40_000]) {
      expect(at[total]!.inMs, why).toBeGreaterThan(30_000);
      expect(at[total]!.inMs, why).toBeLessThanOrEqual(60_000);
    }
    expect(at[40_000]!.blocks, why).toBeLessThan(at[10_000]!.blocks * 1.5 + 50);
  }, 300_000);
});
