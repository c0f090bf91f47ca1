import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { fromPg, PgOutboxStore } from '../../../src/index.js';
import { GUARDED_AGGREGATES_CAP } from '../../../src/sql/lane.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted, resetOutbox } from '../../helpers/outbox-fixtures.js';

/**
 * The settle's guard since migration 020 (settle.ts `settleGuardSql`): an advisory lock of the
 * aggregate between its writers and the settle that empties it, instead of a lock and an update
 * of the aggregate's counter row. ordered-runs.test.ts has the writer mid-transaction (deferred)
 * and the REPEATABLE READ writer whose predecessor was settled; these are the rest.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());
beforeEach(async () => {
  await resetOutbox(db.pool);
});

/** The server process of a pooled client (pg sets it at connect; its types leave it out). */
const pidOf = (client: object) => (client as { processID: number }).processID;

const settleOptions = { deadLettersBlock: true, leaseMs: 5_000 };
const insertA = `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('A', 'payment.charge', '2')`;

const counterRow = async () =>
  (
    await db.pool.query<{ version: string; last_sequence: string }>(
      `SELECT xmin::text || ctid::text AS version, last_sequence::text FROM outbox_aggregates WHERE aggregate_id = 'A'`,
    )
  ).rows[0]!;

const chain = async () =>
  (
    await db.pool.query<{ sequence: string; pending: boolean; ready: boolean }>(
      `SELECT sequence::text, dispatched_at IS NULL AS pending, ready
       FROM outbox_messages WHERE aggregate_id = 'A' ORDER BY sequence`,
    )
  ).rows.map((r) => [Number(r.sequence), r.pending, r.ready]);

describe('the settle that empties an aggregate (migration 020)', () => {
  it('writes nothing to the counter row', async () => {
    await enqueueCommitted(db.pool, [{ topic: 'payment.charge', aggregateId: 'A', payload: 1 }]);
    const store = new PgOutboxStore(fromPg(db.pool));
    const [head] = await store.claim({ owner: 'g#1', batchSize: 10, leaseMs: 5_000 });
    const before = await counterRow();
    const result = await store.settle('g#1', [{ rowId: head!.rowId, kind: 'published' }], {
      ...settleOptions,
    });
    expect(result).toEqual({ settled: [head!.rowId], deferred: [] });
    // Same version of the row: not locked (a lock sets xmax, not xmin) and not rewritten. Before
    // 020 the settle updated it to itself, which gave it a new xmin and ctid.
    expect(await counterRow()).toEqual(before);
  });

  it('makes a writer that comes while it runs wait for its commit; the message is then the head', async () => {
    await enqueueCommitted(db.pool, [{ topic: 'payment.charge', aggregateId: 'A', payload: 1 }]);
    const store = new PgOutboxStore(fromPg(db.pool));
    const [head] = await store.claim({ owner: 'g#2', batchSize: 10, leaseMs: 5_000 });
    const settler = await db.pool.connect();
    const writer = await db.pool.connect();
    try {
      // The settle runs in a transaction held open, as if its statement were still running.
      await settler.query('BEGIN');
      const { rows: settled } = await settler.query<{ id: string; state: string }>(
        `SELECT id, state FROM outbox_settle_advance($1, $2::bigint[], '{}', '{}', 5000)`,
        ['g#2', [head!.rowId]],
      );
      expect(settled).toEqual([{ id: head!.rowId, state: 'settled' }]);
      const inserted = writer.query(insertA);
      const waited = await Promise.race([
        inserted.then(() => 'inserted'),
        new Promise((resolve) => setTimeout(() => resolve('waiting'), 500)),
      ]);
      expect(waited).toBe('waiting');
      const { rows: waiting } = await db.pool.query<{ wait_event_type: string }>(
        `SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1`,
        [pidOf(writer)],
      );
      expect(waiting).toEqual([{ wait_event_type: 'Lock' }]);
      await settler.query('COMMIT');
      await inserted;
    } finally {
      settler.release();
      writer.release();
    }
    expect(await chain()).toEqual([
      [1, false, false],
      [2, true, true],
    ]);
  });

  it('a REPEATABLE READ writer behind a dead letter (skip) whose pending predecessor is settled fails to serialise', async () => {
    await enqueueCommitted(db.pool, [
      { topic: 'payment.charge', aggregateId: 'A', payload: 1 },
      { topic: 'payment.charge', aggregateId: 'A', payload: 2 },
    ]);
    const store = new PgOutboxStore(fromPg(db.pool));
    const claimed = await store.claim({ owner: 'g#3', batchSize: 10, leaseMs: 5_000 });
    expect(claimed.map((m) => m.sequence)).toEqual([1, 2]);
    // 2 is dead-lettered under skip: it leaves the chain (ordered false) but stays in the outbox,
    // and 1 is still pending. The counter's last ordered message is 2.
    await store.settle('g#3', [{ rowId: claimed[1]!.rowId, kind: 'dead', error: 'x' }], {
      deadLettersBlock: false,
      leaseMs: 5_000,
    });
    const writer = await db.pool.connect();
    try {
      await writer.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await writer.query('SELECT 1 FROM outbox LIMIT 1'); // the snapshot: 1 pending
      const settled = await store.settle(
        'g#3',
        [{ rowId: claimed[0]!.rowId, kind: 'published' }],
        settleOptions,
      );
      expect(settled.settled).toEqual([claimed[0]!.rowId]);
      // Its predecessor is 2 (dead, still there, unchanged); what blocks it in its snapshot is 1,
      // gone since. Locking only 2 would let it through, not ready, behind nothing: stuck.
      await expect(writer.query(insertA)).rejects.toMatchObject({ code: '40001' });
      await writer.query('ROLLBACK');
    } finally {
      writer.release();
    }
    await db.pool.query(insertA);
    expect(await chain()).toEqual([
      [1, false, false],
      [2, true, false], // the dead letter
      [3, true, true],
    ]);
  });

  it('in a REPEATABLE READ transaction the settle guards with the counter row, as before 020', async () => {
    await enqueueCommitted(db.pool, [{ topic: 'payment.charge', aggregateId: 'A', payload: 1 }]);
    const store = new PgOutboxStore(fromPg(db.pool));
    const [head] = await store.claim({ owner: 'g#4', batchSize: 10, leaseMs: 5_000 });
    const before = await counterRow();
    const settler = await db.pool.connect();
    try {
      await settler.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      const { rows: settled } = await settler.query<{ state: string }>(
        `SELECT state FROM outbox_settle_advance($1, $2::bigint[], '{}', '{}', 5000)`,
        ['g#4', [head!.rowId]],
      );
      await settler.query('COMMIT');
      expect(settled).toEqual([{ state: 'settled' }]);
    } finally {
      settler.release();
    }
    const after = await counterRow();
    expect(after.last_sequence).toBe(before.last_sequence);
    expect(after.version).not.toBe(before.version);
  });

  it(`a transaction that writes behind pending messages of 20,000 aggregates holds at most ${GUARDED_AGGREGATES_CAP} + 1 advisory locks; while it runs, settles defer what they would empty`, async () => {
    // 20,000 heads, pending; then one transaction writes a second message to each. One lock per
    // aggregate failed here with "out of shared memory" (the server's lock table is shared).
    await db.pool.query(
      `INSERT INTO outbox (aggregate_id, topic, payload)
       SELECT 'bulk-' || g, 'payment.charge', '1' FROM generate_series(1, 20000) g`,
    );
    await enqueueCommitted(db.pool, [{ topic: 'payment.charge', aggregateId: 'A', payload: 1 }]);
    const store = new PgOutboxStore(fromPg(db.pool));
    const [head] = (await store.claim({ owner: 'g#5', batchSize: 20_001, leaseMs: 60_000 })).filter(
      (m) => m.aggregateId === 'A',
    );
    const writer = await db.pool.connect();
    try {
      await writer.query('BEGIN');
      await writer.query(
        `INSERT INTO outbox (aggregate_id, topic, payload)
         SELECT 'bulk-' || g, 'payment.charge', '2' FROM generate_series(1, 20000) g`,
      );
      const { rows: held } = await db.pool.query<{ n: string }>(
        `SELECT count(*)::text AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = $1`,
        [pidOf(writer)],
      );
      expect(Number(held[0]!.n)).toBe(GUARDED_AGGREGATES_CAP + 1);
      // A (not written by the bulk transaction) cannot be told apart from its aggregates: deferred.
      const deferred = await store.settle('g#5', [{ rowId: head!.rowId, kind: 'published' }], {
        ...settleOptions,
        leaseMs: 60_000,
      });
      expect(deferred).toEqual({ settled: [], deferred: [head!.rowId] });
      await writer.query('COMMIT');
    } finally {
      writer.release();
    }
    const settled = await store.settle('g#5', [{ rowId: head!.rowId, kind: 'published' }], {
      ...settleOptions,
    });
    expect(settled).toEqual({ settled: [head!.rowId], deferred: [] });
    const { rows: waiting } = await db.pool.query<{ ready: boolean; n: string }>(
      `SELECT ready, count(*)::text AS n FROM outbox WHERE payload = '2' GROUP BY ready`,
    );
    // Every second message waits behind its head, none is ready: the heads are still pending.
    expect(waiting).toEqual([{ ready: false, n: '20000' }]);
  });

  it("a writer takes the aggregate's lock only behind a pending message of another transaction", async () => {
    await enqueueCommitted(db.pool, [{ topic: 'payment.charge', aggregateId: 'A', payload: 1 }]);
    const writer = await db.pool.connect();
    const locks = async () =>
      (
        await db.pool.query<{ n: string }>(
          `SELECT count(*)::text AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = $1`,
          [pidOf(writer)],
        )
      ).rows[0]!.n;
    try {
      await writer.query('BEGIN');
      // A new aggregate, two messages: the second waits behind the first, written by this same
      // transaction, which nobody can claim before it commits.
      await writer.query(
        `INSERT INTO outbox (aggregate_id, topic, payload)
         VALUES ('B', 'payment.charge', '1'), ('B', 'payment.charge', '2')`,
      );
      expect(await locks()).toBe('0');
      // Behind A's committed, pending message: the lock.
      await writer.query(insertA);
      expect(await locks()).toBe('1');
      await writer.query('COMMIT');
    } finally {
      writer.release();
    }
  });

  it('a batch with nothing ordered settles through one DELETE, fenced like the rest', async () => {
    await enqueueCommitted(
      db.pool,
      ['u1', 'u2', 'u3'].map((aggregateId) => ({
        topic: 'mail.send',
        aggregateId,
        payload: 1,
        ordered: false,
      })),
    );
    const store = new PgOutboxStore(fromPg(db.pool));
    const batch = await store.claim({ owner: 'g#6', batchSize: 10, leaseMs: 5_000 });
    expect(batch).toHaveLength(3);
    // u3's lease expired and another dispatcher took it: our settle must leave it alone.
    await db.pool.query(
      `UPDATE outbox SET lease_owner = 'g#7', lease_expires_at = now() + interval '5 seconds'
       WHERE id = $1`,
      [batch[2]!.rowId],
    );
    const result = await store.settle(
      'g#6',
      batch.map((m) => ({ rowId: m.rowId, kind: 'published' as const })),
      settleOptions,
    );
    expect([...result.settled].sort()).toEqual([batch[0]!.rowId, batch[1]!.rowId].sort());
    const { rows } = await db.pool.query<{ aggregate_id: string; where: string }>(
      `SELECT aggregate_id, 'ring' AS where FROM outbox_messages WHERE dispatched_at IS NOT NULL
       UNION ALL SELECT aggregate_id, 'outbox' FROM outbox ORDER BY 1`,
    );
    expect(rows).toEqual([
      { aggregate_id: 'u1', where: 'ring' },
      { aggregate_id: 'u2', where: 'ring' },
      { aggregate_id: 'u3', where: 'outbox' },
    ]);
    // No chain to move on: no counter row was locked or written.
    const { rows: counters } = await db.pool.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM outbox_aggregates WHERE xmax <> '0'`,
    );
    expect(counters).toEqual([{ n: '0' }]);
  });
});
