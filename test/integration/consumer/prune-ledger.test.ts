import { afterAll, beforeAll, expect, it } from 'vitest';
import { pruneLedger } from '../../../src/consumer/index.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
  // 25 old done rows, 3 recent done rows, 2 old claimed rows (in-flight effects: never pruned).
  await db.pool.query(`
    INSERT INTO processed_messages (consumer, message_id, state, processed_at, lease_expires_at)
    SELECT 'c', 'old-' || i, 'done', now() - interval '20 days', NULL::timestamptz FROM generate_series(1, 25) i
    UNION ALL
    SELECT 'c', 'new-' || i, 'done', now() - interval '1 day', NULL FROM generate_series(1, 3) i
    UNION ALL
    SELECT 'c', 'claimed-' || i, 'claimed', now() - interval '20 days', now() - interval '19 days'
      FROM generate_series(1, 2) i`);
});
afterAll(() => db.drop());

it('deletes old done rows in bounded batches, keeps recent and claimed rows', async () => {
  const first = await pruneLedger(fromPg(db.pool), { batchSize: 10, maxBatches: 2 });
  expect(first).toEqual({ deleted: 20, batches: 2 });
  const rest = await pruneLedger(fromPg(db.pool), { batchSize: 10 });
  expect(rest).toEqual({ deleted: 5, batches: 1 });
  const { rows } = await db.pool.query<{ message_id: string }>(
    'SELECT message_id FROM processed_messages ORDER BY message_id',
  );
  expect(rows.map((r) => r.message_id)).toEqual([
    'claimed-1',
    'claimed-2',
    'new-1',
    'new-2',
    'new-3',
  ]);
  expect(await pruneLedger(fromPg(db.pool), { olderThanMs: 0 })).toEqual({
    deleted: 3,
    batches: 1,
  });
});

it('rejects a nonsensical batch size', async () => {
  await expect(pruneLedger(fromPg(db.pool), { batchSize: 0 })).rejects.toThrow(/batchSize/);
});
