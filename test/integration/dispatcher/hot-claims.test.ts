import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOutbox, fromPg, PgOutboxStore } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { resetOutbox } from '../../helpers/outbox-fixtures.js';

/**
 * Migration 008 leaves half of every outbox page free so a claim's new row version fits on the
 * row's own page: a HOT update, with no new entry in any index. Checked on the row's physical
 * address (ctid): a version that stays on its page keeps the block number. With the default
 * fillfactor of 100 the pages written by the writer are full and nearly every claimed row moves
 * (measured while writing this test: 0 of 400 stayed at fillfactor 100). Migration 023 leaves 60 %
 * free, because the claim's version is longer than the inserted row (the lease's owner and
 * expiry): at 50, 380 of these 400 stayed (the last row of each page moved), and the test now
 * wants every one, counted by the server too (`pg_stat_xact_user_tables`).
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const blocks = async (ids: readonly string[]) => {
  const { rows } = await db.pool.query<{ id: string; block: string }>(
    `SELECT id::text, (ctid::text::point)[0]::bigint::text AS block FROM outbox WHERE id = ANY($1::bigint[])`,
    [ids],
  );
  return new Map(rows.map((r) => [r.id, r.block]));
};

describe('claims as HOT updates (migrations 008 and 023)', () => {
  it('the outbox keeps 60 % of each page free', async () => {
    const { rows } = await db.pool.query<{ reloptions: string[] | null }>(
      `SELECT reloptions FROM pg_class WHERE oid = 'outbox'::regclass`,
    );
    expect(rows[0]!.reloptions).toContain('fillfactor=40');
  });

  it('claimed rows stay on their page', async () => {
    await resetOutbox(db.pool);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await createOutbox().enqueue(
        fromPg(client),
        Array.from({ length: 400 }, (_, i) => ({
          topic: 'mail.send',
          aggregateId: `order:${i}`,
          payload: { orderId: i, lines: ['a realistic payload', 'of a hundred bytes or so'] },
        })),
      );
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    const { rows } = await db.pool.query<{ id: string }>('SELECT id::text FROM outbox');
    const before = await blocks(rows.map((r) => r.id));
    // The claim in a transaction of this test's, so the server's count of this transaction's
    // updates and HOT updates of `outbox` is the claim's alone.
    const claiming = await db.pool.connect();
    let claimed: Awaited<ReturnType<PgOutboxStore['claim']>>;
    let updates: { upd: string; hot: string };
    try {
      await claiming.query('BEGIN');
      // An owner as long as a dispatcher's (host:pid:hex#claim), which is what makes a version
      // longer than its row.
      claimed = await new PgOutboxStore(fromPg(claiming)).claim({
        owner: 'dispatcher-7f9c4b6d5-x2k8q:12345:a1b2c3#1',
        batchSize: 400,
        leaseMs: 30_000,
        deadLettersBlock: true,
      });
      const { rows: counts } = await claiming.query<{ upd: string; hot: string }>(
        `SELECT n_tup_upd::text AS upd, n_tup_hot_upd::text AS hot
         FROM pg_stat_xact_user_tables WHERE relid = 'outbox'::regclass`,
      );
      updates = counts[0]!;
      await claiming.query('COMMIT');
    } finally {
      claiming.release();
    }
    expect(claimed).toHaveLength(400);
    expect(updates).toEqual({ upd: '400', hot: '400' });
    const after = await blocks(claimed.map((m) => m.rowId));
    const stayed = [...after].filter(([id, block]) => before.get(id) === block).length;
    expect(stayed).toBe(400);
  });
});
