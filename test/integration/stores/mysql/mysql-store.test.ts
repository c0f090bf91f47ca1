import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { OutboxMessage } from '../../../../src/core/message.js';
import { InMemoryPublisher } from '../../../../src/publishers/memory/in-memory-publisher.js';
import { createMysqlDispatcher } from '../../../../src/stores/mysql/mysql-dispatcher.js';
import { MysqlOutboxStore } from '../../../../src/stores/mysql/mysql-outbox-store.js';
import { createMysqlOutbox } from '../../../../src/stores/mysql/mysql-writer.js';
import { pruneMysqlOutbox } from '../../../../src/stores/mysql/mysql-retention.js';
import {
  createMysqlTestDatabase,
  requireMysql,
  type MysqlTestDatabase,
} from '../../../helpers/mysql-database.js';

const up = await requireMysql();

describe.runIf(up)('MySQL store: heads, unordered messages, open writers (MariaDB)', () => {
  let db: MysqlTestDatabase;
  let store: MysqlOutboxStore;
  let claims = 0;
  beforeEach(async () => {
    db = await createMysqlTestDatabase();
    store = new MysqlOutboxStore(db.pool);
  });
  afterEach(async () => {
    await db.drop();
  });

  const write = async (messages: OutboxMessage[]) => {
    const connection = await db.connect();
    try {
      await connection.beginTransaction();
      const written = await createMysqlOutbox().enqueue(connection, messages);
      await connection.commit();
      return written;
    } finally {
      await connection.end();
    }
  };
  /** Claims and publishes until nothing is claimable: the sequences claimed, claim by claim. */
  const drain = async () => {
    const rounds: string[][] = [];
    for (;;) {
      const owner = `test#${++claims}`;
      const claimed = await store.claim({ owner, batchSize: 50, leaseMs: 60_000 });
      if (claimed.length === 0) return rounds;
      rounds.push(claimed.map((m) => `${m.aggregateId}#${m.sequence}`).sort());
      await store.settle(
        owner,
        claimed.map((m) => ({ rowId: m.rowId, kind: 'published' })),
        { deadLettersBlock: true },
      );
    }
  };

  it('keeps ordered messages in order around unordered ones, whichever comes first', async () => {
    await write([
      { topic: 'mail.send', aggregateId: 'a', payload: 1, ordered: false },
      { topic: 'charge', aggregateId: 'a', payload: 2 },
      { topic: 'mail.send', aggregateId: 'a', payload: 3, ordered: false },
      { topic: 'charge', aggregateId: 'a', payload: 4 },
    ]);
    // One claim: both unordered messages, the first ordered one (the head) and the run behind it.
    expect(await drain()).toEqual([['a#1', 'a#2', 'a#3', 'a#4']]);
    // Later messages continue the chain. The head moved to the next sequence to be written, 5,
    // which turns out unordered: its settle moves the head on to 6.
    await write([
      { topic: 'mail.send', aggregateId: 'a', payload: 5, ordered: false },
      { topic: 'charge', aggregateId: 'a', payload: 6 },
    ]);
    expect(await drain()).toEqual([['a#5'], ['a#6']]);
  });

  it('writes no head rows for aggregates with only unordered messages', async () => {
    await write(
      Array.from({ length: 20 }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: `u${i}`,
        payload: i,
        ordered: false,
      })),
    );
    expect((await drain()).flat()).toHaveLength(20);
    const [rows] = await db.pool.query('SELECT COUNT(*) AS n FROM outbox_heads');
    expect(Number((rows as { n: number }[])[0]!.n)).toBe(0);
  });

  it('claims around a business transaction that holds an aggregate open, and never waits for it', async () => {
    await write([
      { topic: 't', aggregateId: 'busy', payload: 1 },
      { topic: 't', aggregateId: 'free', payload: 1 },
    ]);
    const writer = await db.connect();
    try {
      await writer.beginTransaction();
      await createMysqlOutbox().enqueue(writer, { topic: 't', aggregateId: 'busy', payload: 2 });
      // The writer holds busy's row in outbox_aggregates; the claim reads it without a lock.
      const claimed = await store.claim({ owner: 'c1', batchSize: 10, leaseMs: 60_000 });
      expect(claimed.map((m) => `${m.aggregateId}#${m.sequence}`).sort()).toEqual([
        'busy#1',
        'free#1',
      ]);
      const settled = await store.settle(
        'c1',
        claimed.map((m) => ({ rowId: m.rowId, kind: 'published' })),
        { deadLettersBlock: true },
      );
      expect(settled.settled).toHaveLength(2);
      await writer.commit();
    } finally {
      await writer.end();
    }
    expect(await drain()).toEqual([['busy#2']]);
  });

  it("records a dispatcher's unordered topics for messages written from then on", async () => {
    const publisher = new InMemoryPublisher();
    await createMysqlDispatcher({ pool: db.pool, publisher, unorderedTopics: ['mail.*'] }).drain();
    await write([
      { topic: 'mail.send', aggregateId: 'o', payload: 1 },
      { topic: 'Mail.send', aggregateId: 'o', payload: 2 },
      { topic: 'payment.charge', aggregateId: 'o', payload: 3 },
    ]);
    const [rows] = await db.pool.query('SELECT topic, ordered FROM outbox ORDER BY id');
    // Case-sensitive, as on Postgres: `Mail.send` is not `mail.*`.
    expect(rows).toEqual([
      { topic: 'mail.send', ordered: 0 },
      { topic: 'Mail.send', ordered: 1 },
      { topic: 'payment.charge', ordered: 1 },
    ]);
  });

  it('refuses asyncSettle and asyncClaim, which MySQL decides server-wide, before recording anything', async () => {
    for (const option of ['asyncSettle', 'asyncClaim'])
      expect(() =>
        createMysqlDispatcher({
          pool: db.pool,
          publisher: new InMemoryPublisher(),
          unorderedTopics: ['audit.*'],
          ...({ [option]: true } as object),
        }),
      ).toThrow(new RegExp(`${option}.*innodb_flush_log_at_trx_commit`));
    const [rows] = await db.pool.query(
      "SELECT count(*) AS n FROM outbox_unordered_topics WHERE pattern LIKE 'audit%'",
    );
    expect(rows).toEqual([{ n: 0 }]);
  });

  it('prunes dispatched messages in batches and never pending ones', async () => {
    await write(
      Array.from({ length: 7 }, (_, i) => ({ topic: 't', aggregateId: `p${i}`, payload: i })),
    );
    await drain();
    await write([{ topic: 't', aggregateId: 'pending', payload: 0 }]);
    expect(await pruneMysqlOutbox(db.pool, { olderThanMs: 0, batchSize: 3 })).toBe(7);
    const [rows] = await db.pool.query('SELECT aggregate_id FROM outbox');
    expect(rows).toEqual([{ aggregate_id: 'pending' }]);
  });
});
