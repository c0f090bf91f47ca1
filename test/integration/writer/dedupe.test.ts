import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createOutbox,
  fromPg,
  OutboxDuplicateError,
  OutboxValidationError,
  type EnqueuedMessage,
  type OutboxMessage,
} from '../../../src/index.js';
import { createRetentionJob, poolSessions, pruneOutbox } from '../../../src/retention/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { inTransaction as inPoolTransaction } from '../../helpers/transaction.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../..', import.meta.url));
const writerScript = fileURLToPath(
  new URL('../../fixtures/writer/dedupe-writer.ts', import.meta.url),
);

let db: TestDatabase;
const outbox = createOutbox();

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

const charge = (key: string, extra: Partial<OutboxMessage> = {}): OutboxMessage => ({
  topic: 'payment.charge',
  aggregateId: 'order:42',
  payload: { orderId: 42, amount: 1200 },
  dedupeKey: key,
  ...extra,
});

/** `fn` in a transaction on its own connection, committed. */
const inTransaction = <T>(fn: (client: pg.PoolClient) => Promise<T>) =>
  inPoolTransaction(db.pool, fn);

const rowsWithKey = async (key: string) =>
  (
    await db.pool.query<{ message_id: string }>(
      'SELECT message_id::text FROM outbox WHERE dedupe_key = $1',
      [key],
    )
  ).rows;

describe('dedupeKey', () => {
  it('a second message with the key writes nothing and returns the first', async () => {
    const first = await inTransaction((c) => outbox.enqueue(fromPg(c), charge('charge:seq')));
    expect(first.deduped).toBe(false);
    const second = await inTransaction((c) =>
      outbox.enqueue(fromPg(c), charge('charge:seq', { aggregateId: 'order:other' })),
    );
    expect(second).toEqual({ ...first, deduped: true });
    expect(await rowsWithKey('charge:seq')).toEqual([{ message_id: first.messageId }]);
  });

  it('a duplicate takes no sequence number: its aggregate has no gap', async () => {
    const gap = (key: string) => charge(key, { aggregateId: 'order:gap' });
    const first = await inTransaction((c) => outbox.enqueue(fromPg(c), gap('gap:1')));
    const [again, next] = await inTransaction((c) =>
      outbox.enqueue(fromPg(c), [gap('gap:1'), gap('gap:2')]),
    );
    const plain = await db.pool.query(
      `INSERT INTO outbox (aggregate_id, topic, payload, dedupe_key)
       VALUES ('order:gap', 'payment.charge', '{}', 'gap:1')`,
    );
    const last = await inTransaction((c) => outbox.enqueue(fromPg(c), gap('gap:3')));
    expect(plain.rowCount).toBe(0);
    expect([first.sequence, again!.sequence, next!.sequence, last.sequence]).toEqual([1, 1, 2, 3]);
    expect(again!.deduped).toBe(true);
  });

  it('a message without a key is never deduplicated, and answers deduped: false', async () => {
    const message = { topic: 'mail.send', aggregateId: 'order:7', payload: {} };
    const a = await inTransaction((c) => outbox.enqueue(fromPg(c), message));
    const b = await inTransaction((c) => outbox.enqueue(fromPg(c), message));
    expect([a.deduped, b.deduped]).toEqual([false, false]);
    expect(a.messageId).not.toBe(b.messageId);
  });

  it("onDuplicate: 'reject' throws naming the key and the first message, and writes nothing of the call", async () => {
    const first = await inTransaction((c) => outbox.enqueue(fromPg(c), charge('charge:reject')));
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const error = await outbox
        .enqueue(
          fromPg(client),
          [
            { topic: 'mail.send', aggregateId: 'order:reject', payload: { n: 1 } },
            charge('charge:reject'),
          ],
          { onDuplicate: 'reject' },
        )
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxDuplicateError);
      expect(error).toMatchObject({ dedupeKey: 'charge:reject', messageId: first.messageId });
      expect((error as Error).message).toContain(first.messageId);
      // The transaction is still usable and the call's other message is gone with the savepoint.
      const { rows } = await client.query(
        "SELECT count(*)::int AS n FROM outbox WHERE aggregate_id = 'order:reject'",
      );
      expect(rows[0].n).toBe(0);
      const fresh = await outbox.enqueue(fromPg(client), charge('charge:reject:2'), {
        onDuplicate: 'reject',
      });
      await client.query('COMMIT');
      expect(fresh.deduped).toBe(false);
    } finally {
      client.release();
    }
    expect(await rowsWithKey('charge:reject:2')).toHaveLength(1);
  });

  it('within one call, a repeated key is answered with the first of the call; reject refuses it', async () => {
    const results = await inTransaction((c) =>
      outbox.enqueue(fromPg(c), [
        charge('charge:batch', { aggregateId: 'order:b' }),
        { topic: 'mail.send', aggregateId: 'order:a', payload: {} },
        charge('charge:batch', { aggregateId: 'order:a' }),
        { topic: 'mail.send', aggregateId: 'order:b', payload: {} },
      ]),
    );
    expect(results.map((r) => [r.aggregateId, r.deduped])).toEqual([
      ['order:b', false],
      ['order:a', false],
      ['order:b', true],
      ['order:b', false],
    ]);
    expect(results[2]!.messageId).toBe(results[0]!.messageId);
    // Input order kept within an aggregate: the keyed message of order:b came first.
    expect(results[3]!.sequence).toBeGreaterThan(results[0]!.sequence);
    expect(await rowsWithKey('charge:batch')).toHaveLength(1);

    const error = await inTransaction((c) =>
      outbox.enqueue(fromPg(c), [charge('charge:twice'), charge('charge:twice')], {
        onDuplicate: 'reject',
      }),
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as Error).message).toMatch(/messages\[1\]\.dedupeKey: repeats the key/);
    expect(await rowsWithKey('charge:twice')).toHaveLength(0);
  });

  it('bad keys and options are refused before anything is written', async () => {
    for (const [dedupeKey, problem] of [
      ['', /must not be empty/],
      ['x'.repeat(256), /256 characters long/],
      [42, /must be a string/],
    ] as const) {
      const error = await inTransaction((c) =>
        outbox.enqueue(fromPg(c), charge(dedupeKey as string)),
      ).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect((error as Error).message).toMatch(problem);
    }
    expect(() => createOutbox({ dedupeWindowMs: 0 })).toThrow(/dedupeWindowMs: must be a positive/);
    const error = await inTransaction((c) =>
      outbox.enqueue(fromPg(c), charge('charge:opt'), {
        onDuplicate: 'ignore' as 'reject',
      }),
    ).catch((e: unknown) => e);
    expect((error as Error).message).toMatch(/onDuplicate: must be 'return' or 'reject'/);
    expect(await rowsWithKey('charge:opt')).toHaveLength(0);
  });

  it('the key expires with its window, and the next message with it is written', async () => {
    const daily = createOutbox({ dedupeWindowMs: 86_400_000 });
    const first = await inTransaction((c) => daily.enqueue(fromPg(c), charge('charge:window')));
    const { rows } = await db.pool.query<{ window: string }>(
      `SELECT (expires_at - created_at)::text AS window FROM outbox_dedupe_keys WHERE dedupe_key = 'charge:window'`,
    );
    expect(rows[0]!.window).toBe('1 day');
    // The window passes (moved, not waited for).
    await db.pool.query(
      `UPDATE outbox_dedupe_keys SET expires_at = now() - interval '1 second' WHERE dedupe_key = 'charge:window'`,
    );
    const next = await inTransaction((c) => daily.enqueue(fromPg(c), charge('charge:window')));
    expect(next.deduped).toBe(false);
    expect(next.messageId).not.toBe(first.messageId);
    const again = await inTransaction((c) => daily.enqueue(fromPg(c), charge('charge:window')));
    expect(again).toMatchObject({ deduped: true, messageId: next.messageId });
  });

  it('the key outlives its message row: retention removes the row, the key still deduplicates until it expires', async () => {
    const first = await inTransaction((c) => outbox.enqueue(fromPg(c), charge('charge:pruned')));
    await db.pool.query(
      `UPDATE outbox SET dispatched_at = now() - interval '40 days' WHERE message_id = $1`,
      [first.messageId],
    );
    const { removed } = await pruneOutbox(fromPg(db.pool), { olderThanMs: 30 * 86_400_000 });
    expect(removed).toBeGreaterThanOrEqual(1);
    expect(await rowsWithKey('charge:pruned')).toHaveLength(0);

    const job = createRetentionJob({ connect: poolSessions(db.pool) });
    const live = await job.runOnce();
    expect(live).toMatchObject({ ran: true, dedupeKeys: { removed: 0 } });
    const second = await inTransaction((c) => outbox.enqueue(fromPg(c), charge('charge:pruned')));
    expect(second).toEqual({ ...first, deduped: true });
    expect(await rowsWithKey('charge:pruned')).toHaveLength(0);

    await db.pool.query(
      `UPDATE outbox_dedupe_keys SET expires_at = now() - interval '1 second' WHERE dedupe_key = 'charge:pruned'`,
    );
    expect(await job.runOnce()).toMatchObject({ ran: true, dedupeKeys: { removed: 1 } });
    await job.stop();
    const { rows } = await db.pool.query(
      `SELECT 1 FROM outbox_dedupe_keys WHERE dedupe_key = 'charge:pruned'`,
    );
    expect(rows).toHaveLength(0);
  });

  it('a plain SQL INSERT with dedupe_key: a duplicate inserts nothing (INSERT 0 0), without an error', async () => {
    const insert = (aggregate: string) =>
      db.pool.query<{ message_id: string }>(
        `INSERT INTO outbox (aggregate_id, topic, payload, dedupe_key)
         VALUES ($1, 'payment.charge', '{"amount": 5}', 'charge:sql') RETURNING message_id::text`,
        [aggregate],
      );
    const first = await insert('order:sql');
    expect(first.rowCount).toBe(1);
    const second = await insert('order:sql-2');
    expect(second.rowCount).toBe(0);
    expect(second.rows).toEqual([]);
    const { rows } = await db.pool.query<{ message_id: string; days: string }>(
      `SELECT message_id::text, (expires_at - created_at)::text AS days FROM outbox_dedupe_keys WHERE dedupe_key = 'charge:sql'`,
    );
    expect(rows).toEqual([{ message_id: first.rows[0]!.message_id, days: '30 days' }]);
    // The writer and plain SQL share the keys.
    const viaWriter = await inTransaction((c) => outbox.enqueue(fromPg(c), charge('charge:sql')));
    expect(viaWriter).toMatchObject({ deduped: true, messageId: first.rows[0]!.message_id });
    await expect(
      db.pool.query(
        `INSERT INTO outbox (aggregate_id, topic, payload, dedupe_key) VALUES ('o', 't', '{}', '')`,
      ),
    ).rejects.toThrow(/dedupe_keys?_key_length/);
  });

  it('two transactions on two connections with one key: one message, the second answered deduped after the first commits', async () => {
    const a = await db.pool.connect();
    const b = await db.pool.connect();
    try {
      await a.query('BEGIN');
      await b.query('BEGIN');
      const first = await outbox.enqueue(
        fromPg(a),
        charge('charge:race', { aggregateId: 'order:a' }),
      );
      let settled = false;
      const second = outbox
        .enqueue(fromPg(b), charge('charge:race', { aggregateId: 'order:b' }))
        .finally(() => (settled = true));
      // b waits on a's uncommitted key: visible as a lock wait on a's transaction.
      await waitFor(async () => {
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'`,
        );
        return rows[0]!.n === 1;
      });
      expect(settled).toBe(false);
      await a.query('COMMIT');
      const answer = await second;
      await b.query('COMMIT');
      expect(answer).toEqual({ ...first, deduped: true });
    } finally {
      a.release();
      b.release();
    }
    expect(await rowsWithKey('charge:race')).toHaveLength(1);
  });

  it('the first rolls back: the waiting second writes its own message', async () => {
    const a = await db.pool.connect();
    const b = await db.pool.connect();
    try {
      await a.query('BEGIN');
      await b.query('BEGIN');
      const first = await outbox.enqueue(fromPg(a), charge('charge:undo', { aggregateId: 'u:a' }));
      const second = outbox.enqueue(fromPg(b), charge('charge:undo', { aggregateId: 'u:b' }));
      await waitFor(async () => {
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'`,
        );
        return rows[0]!.n === 1;
      });
      await a.query('ROLLBACK');
      const answer = await second;
      await b.query('COMMIT');
      expect(answer.deduped).toBe(false);
      expect(answer.messageId).not.toBe(first.messageId);
      expect(await rowsWithKey('charge:undo')).toEqual([{ message_id: answer.messageId }]);
    } finally {
      a.release();
      b.release();
    }
  });

  it('separate processes racing on one key: exactly one message, every other process answered deduped with it, no error', async () => {
    const barrier = 4242;
    const holder = await db.pool.connect();
    try {
      await holder.query('SELECT pg_advisory_lock($1::bigint)', [barrier]);
      const writers = ['p1', 'p2', 'p3', 'p4'].map((name, i) =>
        run(
          process.execPath,
          [
            '--import',
            'tsx',
            writerScript,
            db.url,
            'charge:processes',
            String(barrier),
            i === 0 ? 'rollback' : 'commit',
            name,
          ],
          { cwd: root },
        ),
      );
      // Every process is inside its transaction, waiting at the barrier.
      await waitFor(async () => {
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND locktype = 'advisory'`,
        );
        return rows[0]!.n === 4;
      });
      await holder.query('SELECT pg_advisory_unlock($1::bigint)', [barrier]);
      const outputs = await Promise.all(writers);
      const results = outputs.map(
        ({ stdout }) => JSON.parse(stdout) as EnqueuedMessage & { name: string; finish: string },
      );
      expect(outputs.map((o) => o.stderr)).toEqual(['', '', '', '']);
      const rows = await rowsWithKey('charge:processes');
      expect(rows).toHaveLength(1);
      const committed = results.filter((r) => r.finish === 'commit');
      const writer = committed.filter((r) => !r.deduped);
      expect(writer).toHaveLength(1);
      expect(writer[0]!.messageId).toBe(rows[0]!.message_id);
      // Whether the rolled-back process wrote first or was itself deduped, no committed process
      // points at its message: its key vanished with it.
      for (const r of committed.filter((c) => c.deduped))
        expect(r.messageId).toBe(rows[0]!.message_id);
    } finally {
      holder.release();
    }
  }, 60_000);
});

async function waitFor(condition: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error('condition not reached');
}
