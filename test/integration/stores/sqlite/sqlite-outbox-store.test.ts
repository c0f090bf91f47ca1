import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InMemoryPublisher } from '../../../../src/publishers/memory/in-memory-publisher.js';
import { claimHeadsSql, claimSql } from '../../../../src/sql/sqlite/claim.js';
import {
  createSqliteDispatcher,
  createSqliteOutbox,
  migrateSqlite,
  openSqlite,
  SqliteOutboxStore,
  type SqliteDatabase,
} from '../../../../src/stores/sqlite/index.js';
import { sqliteDriver } from '../../../helpers/libsql.js';
import type { OutboxMessage } from '../../../../src/core/message.js';

let dir: string;
let db: SqliteDatabase;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'agent-outbox-sqlite-store-'));
  db = await openSqlite(join(dir, 'agent.db'), { driver: sqliteDriver() });
  migrateSqlite(db);
});
afterEach(async () => {
  db.close();
  await rm(dir, { recursive: true, force: true });
});

const outbox = createSqliteOutbox();
function write(messages: OutboxMessage[]): void {
  db.transaction(() => outbox.enqueue(db, messages)).immediate();
}
const unordered = (n: number): OutboxMessage[] =>
  Array.from({ length: n }, (_, i) => ({
    topic: 'mail.send',
    aggregateId: `mail-${i}`,
    payload: { i },
    ordered: false,
  }));
const chain = (aggregateId: string, n: number): OutboxMessage[] =>
  Array.from({ length: n }, (_, i) => ({ topic: 'payment.charge', aggregateId, payload: { i } }));
const dispatched = () =>
  Number(
    (
      db.prepare('SELECT count(*) AS n FROM outbox WHERE dispatched_at IS NOT NULL').get() as {
        n: number;
      }
    ).n,
  );

/**
 * Counts the transactions `db` begins, lists the statements it runs with `all`, and makes the
 * statement `failing` throw while set.
 */
function instrument(database: SqliteDatabase) {
  const seen = { begins: 0, ran: [] as string[], failing: undefined as string | undefined };
  const exec = database.exec.bind(database);
  const prepare = database.prepare.bind(database);
  Object.assign(database, {
    exec: (sql: string) => {
      if (sql === 'BEGIN IMMEDIATE') seen.begins++;
      return exec(sql);
    },
    prepare: (sql: string) => {
      const statement = prepare(sql);
      const all = statement.all.bind(statement);
      return Object.assign(statement, {
        all: (...params: unknown[]) => {
          if (sql === seen.failing) throw new Error('injected failure of this statement');
          seen.ran.push(sql);
          return all(...params);
        },
      });
    },
  });
  return seen;
}

describe('SqliteOutboxStore', () => {
  it("commits a batch's settle in the transaction of the next claim: one transaction per batch", async () => {
    write(unordered(1_000));
    const seen = instrument(db);
    const result = await createSqliteDispatcher({
      database: db,
      publisher: new InMemoryPublisher(),
      batchSize: 100,
    }).drain();
    expect(result).toMatchObject({ batches: 10, published: 1_000, fenced: 0 });
    expect(dispatched()).toBe(1_000);
    // 10 claims that found work, and the empty ones that end the drain (the first of which
    // carries the last settle); a settle of its own per batch would make it 20 or more.
    expect(seen.begins).toBeLessThanOrEqual(12);
  });

  it("commits the dispatcher's own writes at synchronous=NORMAL and gives the connection back at FULL", async () => {
    write(unordered(250));
    // The level each COMMIT ran at, read on the connection itself just before it.
    const levels = (database: SqliteDatabase) => {
      const seen: number[] = [];
      const exec = database.exec.bind(database);
      Object.assign(database, {
        exec: (sql: string) => {
          if (sql === 'COMMIT') seen.push(Number(database.pragma('synchronous', { simple: true })));
          return exec(sql);
        },
      });
      return seen;
    };
    const seen = levels(db);
    const publisher = new InMemoryPublisher();
    await createSqliteDispatcher({ database: db, publisher, batchSize: 100 }).drain();
    expect(publisher.published).toHaveLength(250);
    expect(seen.length).toBeGreaterThanOrEqual(3);
    expect(new Set(seen)).toEqual(new Set([1]));
    // The connection is FULL again: a producer's commit on it waits for the disk.
    expect(db.pragma('synchronous', { simple: true })).toBe(2);
    seen.length = 0;
    db.exec('BEGIN IMMEDIATE');
    outbox.enqueue(db, unordered(1));
    db.exec('COMMIT');
    expect(seen).toEqual([2]);

    // `full`: every commit of the dispatcher at the connection's own level.
    await createSqliteDispatcher({ database: db, publisher, synchronous: 'full' }).drain();
    expect(publisher.published).toHaveLength(251);
    expect(seen.length).toBeGreaterThanOrEqual(2);
    expect(new Set(seen)).toEqual(new Set([2]));
  });

  it('refuses an unknown synchronous level and the Postgres-only commit options, before writing anything', () => {
    const publisher = new InMemoryPublisher();
    expect(() =>
      createSqliteDispatcher({
        database: db,
        publisher,
        synchronous: 'off' as 'full',
        unorderedTopics: ['mail.*'],
      }),
    ).toThrow(/synchronous.*'normal' or 'full'/);
    for (const option of ['asyncSettle', 'asyncClaim'])
      expect(() =>
        createSqliteDispatcher({
          database: db,
          publisher,
          unorderedTopics: ['mail.*'],
          ...({ [option]: true } as object),
        }),
      ).toThrow(new RegExp(`${option}.*Postgres option`));
    expect(db.prepare('SELECT count(*) AS n FROM outbox_unordered_topics').get()).toEqual({ n: 0 });
  });

  it('commits a settle with no claim after it on its own, and only then resolves', async () => {
    write(unordered(3));
    const store = new SqliteOutboxStore(db);
    const claimed = await store.claim({ owner: 'a#1', batchSize: 10, leaseMs: 30_000 });
    const settling = store.settle(
      'a#1',
      claimed.map((m) => ({ rowId: m.rowId, kind: 'published' as const })),
      { deadLettersBlock: true },
    );
    expect(dispatched()).toBe(0);
    expect((await settling).settled.sort()).toEqual(claimed.map((m) => m.rowId).sort());
    expect(dispatched()).toBe(3);
  });

  it("keeps a settle when the claim it travels with fails, and fences another claim's rows", async () => {
    write(unordered(4));
    const seen = instrument(db);
    const store = new SqliteOutboxStore(db);
    const first = await store.claim({ owner: 'a#1', batchSize: 2, leaseMs: 30_000 });
    const settling = store.settle(
      'a#1',
      [...first, { rowId: '999' }].map((m) => ({ rowId: m.rowId, kind: 'published' as const })),
      { deadLettersBlock: true },
    );
    seen.failing = claimHeadsSql;
    await expect(store.claim({ owner: 'a#2', batchSize: 2, leaseMs: 30_000 })).rejects.toThrow(
      /injected failure/,
    );
    // The settle ran again alone: its rows are dispatched, the row it never held is not counted.
    expect((await settling).settled.sort()).toEqual(first.map((m) => m.rowId).sort());
    expect(dispatched()).toBe(2);
    seen.failing = undefined;
    const second = await store.claim({ owner: 'a#3', batchSize: 10, leaseMs: 30_000 });
    expect(second).toHaveLength(2);
    // An expired lease taken over by a later claim: the first owner's settle changes nothing.
    expect(
      (
        await store.settle(
          'a#2',
          second.map((m) => ({ rowId: m.rowId, kind: 'published' as const })),
          { deadLettersBlock: true },
        )
      ).settled,
    ).toEqual([]);
  });

  it('fails the settle and the claim alike when the write lock cannot be had, and writes nothing', async () => {
    write(unordered(2));
    const store = new SqliteOutboxStore(db);
    const claimed = await store.claim({ owner: 'a#1', batchSize: 10, leaseMs: 30_000 });
    const other = await openSqlite(join(dir, 'agent.db'), {
      busyTimeoutMs: 0,
      driver: sqliteDriver(),
    });
    db.pragma('busy_timeout = 0');
    try {
      const settling = store.settle(
        'a#1',
        claimed.map((m) => ({ rowId: m.rowId, kind: 'published' as const })),
        { deadLettersBlock: true },
      );
      other.exec('BEGIN IMMEDIATE');
      await expect(store.claim({ owner: 'a#2', batchSize: 10, leaseMs: 30_000 })).rejects.toThrow(
        /locked|busy/i,
      );
      await expect(settling).rejects.toThrow(/locked|busy/i);
      other.exec('ROLLBACK');
      expect(dispatched()).toBe(0);
      // What the dispatcher does next: the settle again, while the lease lasts.
      await store.settle(
        'a#1',
        claimed.map((m) => ({ rowId: m.rowId, kind: 'published' as const })),
        { deadLettersBlock: true },
      );
      expect(dispatched()).toBe(2);
    } finally {
      other.close();
    }
  });

  it('claims heads only after a claim without ordered messages, still one head per aggregate, and runs again after', async () => {
    write(unordered(3));
    const seen = instrument(db);
    const store = new SqliteOutboxStore(db);
    const claim = async (owner: string) => {
      seen.ran = [];
      const messages = await store.claim({ owner, batchSize: 10, leaseMs: 30_000 });
      const statement = seen.ran.includes(claimSql)
        ? 'runs'
        : seen.ran.includes(claimHeadsSql)
          ? 'heads'
          : 'none';
      return { statement, messages };
    };
    const settle = (owner: string, messages: { rowId: string }[]) =>
      store.settle(
        owner,
        messages.map((m) => ({ rowId: m.rowId, kind: 'published' as const })),
        { deadLettersBlock: true },
      );
    const first = await claim('a#1');
    expect(first.statement).toBe('runs');
    expect(first.messages.every((m) => m.ordered === false)).toBe(true);
    await settle('a#1', first.messages);
    write([...chain('order-1', 4), ...chain('order-2', 2)]);
    // Heads only: each aggregate's first message, not those queued behind it.
    const second = await claim('a#2');
    expect(second.statement).toBe('heads');
    expect(second.messages.map((m) => [m.aggregateId, m.sequence]).sort()).toEqual([
      ['order-1', 1],
      ['order-2', 1],
    ]);
    await settle('a#2', second.messages);
    // Runs again: the rest of both chains in one claim, each in order.
    const third = await claim('a#3');
    expect(third.statement).toBe('runs');
    expect(third.messages.map((m) => `${m.aggregateId}:${m.sequence}`).sort()).toEqual([
      'order-1:2',
      'order-1:3',
      'order-1:4',
      'order-2:2',
    ]);
  });

  it('claims heads only while the heads alone fill the batch, and takes runs again when there is room', async () => {
    // 12 aggregates of 3 messages, batch 10: 12 heads fill a batch, no run could have a share.
    write(Array.from({ length: 12 }, (_, a) => chain(`busy-${a}`, 3)).flat());
    const seen = instrument(db);
    const store = new SqliteOutboxStore(db);
    const claims: { statement: string; aggregates: number; messages: number }[] = [];
    for (let i = 1; ; i++) {
      seen.ran = [];
      const messages = await store.claim({ owner: `b#${i}`, batchSize: 10, leaseMs: 30_000 });
      if (messages.length === 0) break;
      claims.push({
        statement: seen.ran.includes(claimSql) ? 'runs' : 'heads',
        aggregates: new Set(messages.map((m) => m.aggregateId)).size,
        messages: messages.length,
      });
      await store.settle(
        `b#${i}`,
        messages.map((m) => ({ rowId: m.rowId, kind: 'published' as const })),
        { deadLettersBlock: true },
      );
    }
    // Every message once, each aggregate's in order (the settle makes the next one the head).
    expect(dispatched()).toBe(36);
    expect(claims).toEqual([
      // Runs first; the 12 heads fill the batch of 10 and leave no run a share.
      { statement: 'runs', aggregates: 10, messages: 10 },
      // So heads only, while the heads alone fill it…
      { statement: 'heads', aggregates: 10, messages: 10 },
      { statement: 'heads', aggregates: 10, messages: 10 },
      // …until a claim finds 2 heads, which leave 8 of the batch: a share for each…
      { statement: 'heads', aggregates: 2, messages: 2 },
      // Runs again: the two last aggregates' two remaining messages each, in one claim.
      { statement: 'runs', aggregates: 2, messages: 4 },
    ]);
  });
});
