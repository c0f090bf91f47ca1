import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { fromPg, PgOutboxStore } from '../../../src/index.js';
import { candidateStatesSql, HEAD_WALK_STEPS, nextDueSql } from '../../../src/sql/cdc.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted, resetOutbox } from '../../helpers/outbox-fixtures.js';

/**
 * The CDC dispatcher's own statements (sql/cdc.ts), on the shared server — a stock Postgres,
 * whatever its wal_level: they read the outbox like any query, and the CDC tests proper may run
 * on a private server of another major version.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());
beforeEach(async () => {
  await resetOutbox(db.pool);
});

const topic = 'payment.charge';

async function states(ids: string[]): Promise<Record<string, string>> {
  const { rows } = await db.pool.query<{ id: string; state: string }>(
    candidateStatesSql('public'),
    [ids],
  );
  return Object.fromEntries(rows.map((r) => [r.id, r.state]));
}

async function nextDue(): Promise<number | undefined> {
  const { rows } = await db.pool.query<{ dueInMs: string }>(nextDueSql('public'));
  return rows[0] ? Number(rows[0].dueInMs) : undefined;
}

describe('candidateStatesSql', () => {
  it('reads each candidate against its aggregate head: blocked behind a due or leased head, deferred behind one backing off, done, gone', async () => {
    const [a1, a2, a3] = await enqueueCommitted(
      db.pool,
      [1, 2, 3].map((n) => ({ topic, aggregateId: 'A', payload: n })),
    );
    const [b1, b2] = await enqueueCommitted(
      db.pool,
      [1, 2].map((n) => ({ topic, aggregateId: 'B', payload: n })),
    );
    const ids = [a1!.id, a2!.id, a3!.id, b1!.id, b2!.id, '999999'];
    expect(await states(ids)).toEqual({
      [a1!.id]: 'blocked', // claimable: the last claim missed it
      [a2!.id]: 'blocked',
      [a3!.id]: 'blocked',
      [b1!.id]: 'blocked',
      [b2!.id]: 'blocked',
      '999999': 'gone',
    });
    const store = new PgOutboxStore(fromPg(db.pool));
    const claimed = await store.claim({ owner: 'x#1', batchSize: 10, leaseMs: 60_000 });
    expect(claimed).toHaveLength(5);
    await store.settle(
      'x#1',
      [
        { rowId: a1!.id, kind: 'published' },
        { rowId: a2!.id, kind: 'retry', error: 'down', delayMs: 60_000 },
        { rowId: a3!.id, kind: 'release' },
      ],
      { deadLettersBlock: true, leaseMs: 60_000 },
    );
    expect(await states(ids)).toEqual({
      [a1!.id]: 'done',
      [a2!.id]: 'deferred', // backing off
      [a3!.id]: 'deferred', // behind it
      [b1!.id]: 'leased',
      [b2!.id]: 'leased',
      '999999': 'gone',
    });
  });
});

describe('candidateStatesSql: finding the head', () => {
  // The head is found by walking back along prev_id from the earliest candidate (issue 25:
  // bounded under a held snapshot); past HEAD_WALK_STEPS pending messages, by the chain index.
  for (const [label, ahead] of [
    ['a few', 3],
    ['more pending messages than the walk takes', HEAD_WALK_STEPS + 20],
  ] as const) {
    it(`a candidate with ${label} (${ahead}) ahead of it reads its head's state: deferred behind a head backing off, blocked once it is due`, async () => {
      const chain = await enqueueCommitted(
        db.pool,
        Array.from({ length: ahead + 1 }, (_, n) => ({ topic, aggregateId: 'deep', payload: n })),
      );
      const head = chain[0]!;
      const candidate = chain[ahead]!;
      await db.pool.query(
        `UPDATE outbox SET available_at = now() + interval '1 hour' WHERE id = $1`,
        [head.id],
      );
      expect(await states([candidate.id])).toEqual({ [candidate.id]: 'deferred' });
      await db.pool.query(
        `UPDATE outbox SET available_at = now() - interval '1 second' WHERE id = $1`,
        [head.id],
      );
      expect(await states([candidate.id])).toEqual({ [candidate.id]: 'blocked' });
      await db.pool.query(`UPDATE outbox SET dead_lettered_at = now() WHERE id = $1`, [head.id]);
      expect(await states([candidate.id])).toEqual({ [candidate.id]: 'deferred' });
    });
  }

  it('walks past a predecessor that left the chain (dead-lettered under skip) to the head before it', async () => {
    const [head, left, candidate] = await enqueueCommitted(
      db.pool,
      [1, 2, 3].map((n) => ({ topic, aggregateId: 'gap', payload: n })),
    );
    // What a skip settle leaves: dead-lettered, out of the chain, still undispatched.
    await db.pool.query(
      `UPDATE outbox SET dead_lettered_at = now(), ordered = false WHERE id = $1`,
      [left!.id],
    );
    await db.pool.query(
      `UPDATE outbox SET available_at = now() + interval '1 hour' WHERE id = $1`,
      [head!.id],
    );
    expect(await states([candidate!.id])).toEqual({ [candidate!.id]: 'deferred' });
  });
});

describe('candidateStatesSql dueInMs', () => {
  it("gives a deferred row's wait on the server's clock: its head's backoff, its own delay, whichever ends first; Infinity behind a held head", async () => {
    const [h1, h2] = await enqueueCommitted(
      db.pool,
      [1, 2].map((n) => ({ topic, aggregateId: 'H', payload: n })),
    );
    const [held, behindHeld] = await enqueueCommitted(db.pool, [
      { topic, aggregateId: 'Q', payload: 1, requiresApproval: true },
      { topic, aggregateId: 'Q', payload: 2 },
    ]);
    const store = new PgOutboxStore(fromPg(db.pool));
    await store.claim({ owner: 'x#1', batchSize: 1, leaseMs: 60_000 });
    await store.settle('x#1', [{ rowId: h1!.id, kind: 'retry', error: 'down', delayMs: 8_000 }], {
      deadLettersBlock: true,
      leaseMs: 60_000,
    });
    const due = async () => {
      const { rows } = await db.pool.query<{ id: string; dueInMs: string | null }>(
        candidateStatesSql('public'),
        [[h1!.id, h2!.id, held!.id, behindHeld!.id]],
      );
      return Object.fromEntries(rows.map((r) => [r.id, Number(r.dueInMs)]));
    };
    let got = await due();
    // The head and the row behind it both wait for the head's backoff (measured by the
    // statement's own now(): at most 8 s, less only by the time since the settle).
    for (const id of [h1!.id, h2!.id]) {
      expect(got[id]).toBeLessThanOrEqual(8_000);
      expect(got[id]).toBeGreaterThan(0);
    }
    expect(got[held!.id]).toBe(Infinity);
    expect(got[behindHeld!.id]).toBe(Infinity);
    // Its own delay, earlier than the head's backoff: the earlier one.
    await db.pool.query(
      `UPDATE outbox SET available_at = now() + interval '1 second' WHERE id = $1`,
      [h2!.id],
    );
    got = await due();
    expect(got[h2!.id]).toBeLessThanOrEqual(1_000);
    expect(got[h1!.id]).toBeGreaterThan(1_000);
  });
});

describe('nextDueSql', () => {
  it('gives the first ready message due later, in ms from now; none when nothing waits for its time', async () => {
    expect(await nextDue()).toBeUndefined();
    await enqueueCommitted(db.pool, [{ topic, aggregateId: 'A', payload: 1 }]);
    expect(await nextDue()).toBeUndefined();
    await db.pool.query(`UPDATE outbox SET available_at = now() + interval '5 seconds'`);
    const due = await nextDue();
    expect(due).toBeGreaterThan(3_000);
    expect(due).toBeLessThanOrEqual(5_000);
  });

  it('skips a held head (available_at = infinity, awaiting approval): it never falls due by time', async () => {
    const [held, behind] = await enqueueCommitted(db.pool, [
      { topic, aggregateId: 'H', payload: 1, requiresApproval: true },
      { topic, aggregateId: 'H', payload: 2 },
    ]);
    // On Postgres before 17 `infinity - now()` is an error ("cannot subtract infinite timestamps").
    expect(await nextDue()).toBeUndefined();
    // Both recorded in the table: their WAL positions may be confirmed.
    expect(await states([held!.id, behind!.id])).toEqual({
      [held!.id]: 'deferred',
      [behind!.id]: 'deferred',
    });
    const [head] = await enqueueCommitted(db.pool, [{ topic, aggregateId: 'B', payload: 1 }]);
    await db.pool.query(
      `UPDATE outbox SET available_at = now() + interval '1 second' WHERE id = $1`,
      [head!.id],
    );
    expect(await nextDue()).toBeGreaterThan(0);
    const { rows } = await db.pool.query<{ id: string; state: string }>(
      candidateStatesSql('public'),
      [[head!.id]],
    );
    expect(rows).toEqual([{ id: head!.id, state: 'deferred', dueInMs: expect.any(String) }]);
  });
});
