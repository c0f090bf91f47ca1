import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pruneDispatchedBatchSql, archiveDispatchedBatchSql } from '../../../src/sql/retention.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { explainAnalyze, rowsRead } from '../../helpers/explain.js';
import { insertWithTriggersOff } from '../../helpers/outbox-fixtures.js';

/**
 * Retention's batch (issue 25 took its row locks away: a WAL record per row). What must still
 * hold: a batch reads about its size whatever is retained, and a row that stops qualifying
 * between the batch's read and its delete is kept (the DELETE re-checks the latest version).
 */
let db: TestDatabase;
const OLD = 50_000;
const BATCH = 500;

beforeAll(async () => {
  db = await createTestDatabase();
  // Dispatched an hour ago, loaded with triggers off.
  await insertWithTriggersOff(db.pool, [
    {
      text: `INSERT INTO outbox (aggregate_id, topic, payload, sequence, ordered, ready, dispatched_at)
       SELECT 'agg-' || g, 'order.created', '{}'::jsonb, 1, true, true,
              now() - interval '1 hour' + g * interval '1 millisecond'
       FROM generate_series(1, $1::int) g`,
      values: [OLD],
    },
  ]);
  await db.pool.query('ANALYZE outbox');
}, 120_000);
afterAll(async () => {
  await db?.drop();
});

describe('retention batch', () => {
  for (const [name, sql] of [
    ['prune', pruneDispatchedBatchSql('public')],
    ['archive', archiveDispatchedBatchSql('public')],
  ] as const) {
    it(`${name}: one batch of ${BATCH} reads about ${BATCH} outbox rows, not the ${OLD.toLocaleString('en-US')} retained`, async () => {
      const client = await db.pool.connect();
      try {
        await client.query('BEGIN');
        const plan = await explainAnalyze(client, sql, [60_000, BATCH]);
        const read = rowsRead(plan);
        // Three nodes name the outbox, each with the batch's rows: the batch's index scan, the
        // delete's primary-key probes and the delete itself (its RETURNING).
        expect(read).toBeGreaterThanOrEqual(BATCH);
        expect(read).toBeLessThanOrEqual(BATCH * 3 + 10);
        const left = await client.query<{ n: number }>('SELECT count(*)::int AS n FROM outbox');
        expect(left.rows[0]!.n).toBe(OLD - BATCH);
      } finally {
        await client.query('ROLLBACK');
        client.release();
      }
    });
  }

  it('a row that stops qualifying after the batch was read is kept (no lock, re-checked)', async () => {
    // A second session un-dispatches the oldest row and holds its transaction open; the batch
    // (which picked that row from its snapshot) waits for it, then re-checks the new version.
    const holder = await db.pool.connect();
    const pruner = await db.pool.connect();
    try {
      const { rows } = await holder.query<{ id: string }>(
        `SELECT id::text FROM outbox ORDER BY dispatched_at LIMIT 1`,
      );
      const oldest = rows[0]!.id;
      await holder.query('BEGIN');
      await holder.query(`UPDATE outbox SET dispatched_at = NULL WHERE id = $1`, [oldest]);
      await pruner.query('BEGIN');
      const batch = pruner.query<{ n: number }>(pruneDispatchedBatchSql('public'), [60_000, 10]);
      // Let the batch read its rows and block on the held one.
      let waiting = false;
      for (let i = 0; i < 100 && !waiting; i++) {
        await new Promise((r) => setTimeout(r, 50));
        const w = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
           WHERE wait_event_type = 'Lock' AND datname = current_database()`,
        );
        waiting = w.rows[0]!.n > 0;
      }
      expect(waiting).toBe(true);
      await holder.query('COMMIT');
      const n = (await batch).rows[0]!.n;
      expect(n).toBe(9);
      const kept = await pruner.query<{ dispatched_at: Date | null }>(
        `SELECT dispatched_at FROM outbox WHERE id = $1`,
        [oldest],
      );
      expect(kept.rows).toEqual([{ dispatched_at: null }]);
    } finally {
      await pruner.query('ROLLBACK').catch(() => undefined);
      await holder.query('ROLLBACK').catch(() => undefined);
      holder.release();
      pruner.release();
    }
  });
});
