import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createDispatcher, createOutbox, fromPg } from '../../../src/index.js';
import { previewPrune, pruneOutbox } from '../../../src/retention/prune-outbox.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { noopPublisher } from '../../helpers/held-snapshot.js';
import { DISPATCHED_COLUMNS } from '../../../src/sql/dispatched-log.js';

const DAY = 86_400_000;

/**
 * Messages per slot of the ring (its per-message table of migration 018 and its batch table of
 * migration 021), and which slot the settle writes.
 */
async function ring(db: TestDatabase) {
  const slot = (k: number) =>
    `(SELECT count(*) FROM outbox_dispatched_${k})
     + (SELECT coalesce(sum(message_count), 0) FROM outbox_dispatched_batch_${k})`;
  const { rows } = await db.pool.query<{ slot: number; n0: number; n1: number; n2: number }>(
    `SELECT (SELECT slot FROM outbox_dispatched_ring) AS slot,
            (${slot(0)})::int AS n0, (${slot(1)})::int AS n1, (${slot(2)})::int AS n2`,
  );
  return rows[0]!;
}

async function enqueueAndDrain(db: TestDatabase, n: number, prefix: string, batchSize = 200) {
  const outbox = createOutbox();
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    await outbox.enqueue(
      fromPg(client),
      Array.from({ length: n }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: `${prefix}-${i % 5}`,
        payload: { i },
      })),
    );
    await client.query('COMMIT');
  } finally {
    client.release();
  }
  const drained = await createDispatcher({
    executor: fromPg(db.pool),
    publisher: noopPublisher,
    batchSize,
  }).drain();
  expect(drained.published).toBe(n);
}

describe('the dispatched ring (migrations 018 and 021)', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db.drop());
  beforeEach(async () => {
    await db.pool.query(
      `TRUNCATE outbox, outbox_aggregates, outbox_archive, outbox_dispatched_0,
                outbox_dispatched_1, outbox_dispatched_2, outbox_dispatched_batch_0,
                outbox_dispatched_batch_1, outbox_dispatched_batch_2;
       UPDATE outbox_dispatched_ring SET slot = 0`,
    );
  });

  it('every per-message ring table has the columns of outbox, in its order', async () => {
    const { rows } = await db.pool.query<{ table: string; columns: string[] }>(
      `SELECT c.relname AS table, array_agg(a.attname::text ORDER BY a.attnum) AS columns
       FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
       WHERE c.relname IN ('outbox', 'outbox_dispatched_0', 'outbox_dispatched_1', 'outbox_dispatched_2')
         AND c.relnamespace = 'public'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
       GROUP BY c.relname ORDER BY c.relname`,
    );
    expect(rows).toHaveLength(4);
    for (const row of rows) expect(row.columns, row.table).toEqual([...DISPATCHED_COLUMNS]);
  });

  it('a settle moves the published rows, whole, into one batch of the current slot', async () => {
    await enqueueAndDrain(db, 20, 'a');
    const left = await db.pool.query(`SELECT count(*)::int AS n FROM outbox`);
    expect(left.rows[0].n).toBe(0);
    expect(await ring(db)).toEqual({ slot: 0, n0: 20, n1: 0, n2: 0 });
    const batches = await db.pool.query(
      `SELECT message_count, cardinality(messages) AS n,
              (SELECT count(*)::int FROM outbox_dispatched_0) AS per_message,
              ids = (SELECT int8range(min(id), max(id), '[]') FROM outbox_messages) AS ids
       FROM outbox_dispatched_batch_0`,
    );
    expect(batches.rows).toEqual([{ message_count: 20, n: 20, per_message: 0, ids: true }]);
    const { rows } = await db.pool.query(
      `SELECT payload, attempts, lease_owner, ready, dispatched_at IS NOT NULL AS dispatched
       FROM outbox_messages ORDER BY id LIMIT 1`,
    );
    expect(rows[0]).toEqual({
      payload: { i: 0 },
      attempts: 1,
      lease_owner: null,
      ready: false,
      dispatched: true,
    });
    // Per aggregate, the ring keeps the commit order the chain had.
    const order = await db.pool.query<{ ok: boolean }>(
      `SELECT bool_and(sequence > prev) AS ok FROM (
         SELECT sequence, lag(sequence, 1, 0::bigint) OVER (PARTITION BY aggregate_id ORDER BY dispatched_at, id) AS prev
         FROM outbox_messages) s`,
    );
    expect(order.rows[0]!.ok).toBe(true);
  });

  it('retention keeps a slot until all of it is past the cut-off, then truncates it', async () => {
    // Batches of 5: two batch rows, so that one of them can be younger than the other.
    await enqueueAndDrain(db, 10, 'b', 5);
    // Fresh rows: nothing is old enough, and the current table is not half a retention old.
    expect(await pruneOutbox(fromPg(db.pool), { olderThanMs: 30 * DAY })).toMatchObject({
      removed: 0,
    });
    expect(await ring(db)).toEqual({ slot: 0, n0: 10, n1: 0, n2: 0 });

    // 20 days old: past half the retention, so the settle moves on; none is past the cut-off.
    await db.pool.query(
      `UPDATE outbox_dispatched_batch_0 SET dispatched_at = now() - interval '20 days'`,
    );
    expect((await pruneOutbox(fromPg(db.pool), { olderThanMs: 30 * DAY })).removed).toBe(0);
    expect(await ring(db)).toEqual({ slot: 1, n0: 10, n1: 0, n2: 0 });
    await enqueueAndDrain(db, 4, 'c');
    expect(await ring(db)).toEqual({ slot: 1, n0: 10, n1: 4, n2: 0 });

    // One batch of slot 0 still inside the retention keeps the whole slot.
    const two = await db.pool.query(`SELECT count(*)::int AS n FROM outbox_dispatched_batch_0`);
    expect(two.rows[0].n).toBe(2);
    await db.pool.query(
      `UPDATE outbox_dispatched_batch_0 SET dispatched_at = now() - interval '40 days'
       WHERE upper(ids) <> (SELECT max(upper(ids)) FROM outbox_dispatched_batch_0)`,
    );
    expect((await previewPrune(fromPg(db.pool), { olderThanMs: 30 * DAY })).outboxRows).toBe(0);
    expect((await pruneOutbox(fromPg(db.pool), { olderThanMs: 30 * DAY })).removed).toBe(0);

    await db.pool.query(
      `UPDATE outbox_dispatched_batch_0 SET dispatched_at = now() - interval '40 days'`,
    );
    const preview = await previewPrune(fromPg(db.pool), { olderThanMs: 30 * DAY });
    expect(preview.outboxRows).toBe(10);
    expect(preview.oldestDispatchedAt!.getTime()).toBeLessThan(Date.now() - 39 * DAY);
    expect((await pruneOutbox(fromPg(db.pool), { olderThanMs: 30 * DAY })).removed).toBe(10);
    expect(await ring(db)).toEqual({ slot: 1, n0: 0, n1: 4, n2: 0 });
  });

  it('a cut-off of 0 empties every table, archiving them when asked', async () => {
    // Rows as migration 018's settles left them, in slot 0's per-message table.
    await db.pool.query(
      `INSERT INTO outbox_dispatched_0 (id, message_id, aggregate_id, topic, payload, headers,
         sequence, created_at, available_at, dispatched_at, attempts, shadow, ordered, ready)
       SELECT -g, gen_random_uuid(), 'old-' || g, 'mail.send', jsonb_build_object('i', -g), '{}',
              1, now(), now(), now(), 1, false, true, false
       FROM generate_series(1, 2) g`,
    );
    await enqueueAndDrain(db, 4, 'd');
    await db.pool.query(`UPDATE outbox_dispatched_ring SET slot = 2`);
    await enqueueAndDrain(db, 3, 'e');
    expect(await ring(db)).toEqual({ slot: 2, n0: 6, n1: 0, n2: 3 });
    const result = await pruneOutbox(fromPg(db.pool), { olderThanMs: 0, archive: true });
    expect(result.removed).toBe(9);
    const after = await ring(db);
    expect([after.n0, after.n1, after.n2]).toEqual([0, 0, 0]);
    expect(after.slot).not.toBe(2);
    const archived = await db.pool.query(
      `SELECT count(*)::int AS n, count(*) FILTER (WHERE payload ? 'i')::int AS with_payload
       FROM outbox_archive`,
    );
    expect(archived.rows[0]).toEqual({ n: 9, with_payload: 9 });
    // The settle writes the table the ring names now.
    await enqueueAndDrain(db, 2, 'f');
    const now = await ring(db);
    expect(now[`n${now.slot}` as 'n0']).toBe(2);
  });

  it('the lookups find dispatched messages by id and by message id in both kinds of table', async () => {
    await db.pool.query(
      `INSERT INTO outbox_dispatched_1 (id, message_id, aggregate_id, topic, payload, headers,
         sequence, created_at, available_at, dispatched_at, attempts, shadow, ordered, ready)
       VALUES (-1, '00000000-0000-7000-8000-000000000001', 'old', 'mail.send', '{"old": true}',
               '{}', 1, now(), now(), now(), 1, false, true, false)`,
    );
    // One settle, two batches: a jump in ids over BATCH_ID_GAP starts a new one.
    const outbox = createOutbox();
    for (const prefix of ['h', 'i']) {
      await outbox.enqueue(
        fromPg(db.pool),
        [0, 1, 2].map((i) => ({
          topic: 'mail.send',
          aggregateId: `${prefix}-${i}`,
          payload: { i },
        })),
        { allowAutocommit: true },
      );
      await db.pool.query(`SELECT setval('outbox_id_seq', nextval('outbox_id_seq') + 5000)`);
    }
    const drained = await createDispatcher({
      executor: fromPg(db.pool),
      publisher: noopPublisher,
    }).drain();
    expect(drained.published).toBe(6);
    const all = await db.pool.query<{ id: string; message_id: string }>(
      `SELECT id::text, message_id::text FROM outbox_messages ORDER BY id`,
    );
    expect(all.rows).toHaveLength(7);
    const byId = await db.pool.query(
      `SELECT id::text, payload, dispatched_at IS NOT NULL AS dispatched, lease_owner
       FROM outbox_dispatched_by_id($1::bigint[]) ORDER BY id`,
      [[all.rows[0]!.id, all.rows[2]!.id, all.rows[6]!.id, '999999999']],
    );
    expect(byId.rows).toEqual([
      { id: '-1', payload: { old: true }, dispatched: true, lease_owner: null },
      { id: all.rows[2]!.id, payload: { i: 1 }, dispatched: true, lease_owner: null },
      { id: all.rows[6]!.id, payload: { i: 2 }, dispatched: true, lease_owner: null },
    ]);
    const byMessageId = await db.pool.query<{ id: string }>(
      `SELECT id::text FROM outbox_dispatched_by_message_id($1::uuid[]) ORDER BY id`,
      [[all.rows[0]!.message_id, all.rows[4]!.message_id, '00000000-0000-7000-8000-00000000ffff']],
    );
    expect(byMessageId.rows.map((r) => r.id)).toEqual([all.rows[0]!.id, all.rows[4]!.id]);
    const batches = await db.pool.query(
      `SELECT message_count FROM outbox_dispatched_batch_0 ORDER BY lower(ids)`,
    );
    expect(batches.rows).toEqual([{ message_count: 3 }, { message_count: 3 }]);
  });

  it('rows dispatched before migration 018 (still in outbox) are pruned by rows as before', async () => {
    await db.pool.query(
      `INSERT INTO outbox (aggregate_id, topic, payload, sequence, ordered, ready, dispatched_at)
       SELECT 'legacy-' || g, 'mail.send', '{}', 1, true, false, now() - interval '40 days'
       FROM generate_series(1, 7) g`,
    );
    await enqueueAndDrain(db, 3, 'g');
    const result = await pruneOutbox(fromPg(db.pool), { olderThanMs: 30 * DAY });
    expect(result.removed).toBe(7);
    expect(await ring(db)).toEqual({ slot: 0, n0: 3, n1: 0, n2: 0 });
  });
});
