import { PrismaMariaDb } from '@prisma/adapter-mariadb';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { InMemoryPublisher } from '../../../../src/publishers/memory/in-memory-publisher.js';
import { fromPrismaMysql } from '../../../../src/stores/mysql/index.js';
import { createMysqlDispatcher } from '../../../../src/stores/mysql/mysql-dispatcher.js';
import { createMysqlOutbox } from '../../../../src/stores/mysql/mysql-writer.js';
import {
  createMysqlTestDatabase,
  requireMysql,
  type MysqlTestDatabase,
} from '../../../helpers/mysql-database.js';
import { importPrismaClient, MYSQL_PRISMA_SCHEMA } from '../../../helpers/prisma-client.js';

/**
 * Issue 45: the MySQL writer in a Prisma 7 interactive transaction, through the MariaDB driver
 * adapter (`@prisma/adapter-mariadb`), on the MariaDB here.
 */
const up = await requireMysql();

/**
 * The generated client's surface these tests use, copied from what Prisma 7.10 generates for
 * test/fixtures/prisma/mysql.prisma: the generated types live in .tmp/, which tsc does not see
 * on a fresh clone.
 */
interface RecordedTransactionClient {
  $executeRawUnsafe(query: string, ...values: any[]): Promise<number>;
  $queryRawUnsafe<T = unknown>(query: string, ...values: any[]): Promise<T>;
  order: { create(args: { data: { id: string; amount: number } }): Promise<{ id: string }> };
}
interface RecordedPrismaClient extends RecordedTransactionClient {
  $disconnect(): Promise<void>;
  $transaction<R>(fn: (prisma: RecordedTransactionClient) => Promise<R>): Promise<R>;
}
type PrismaClientClass = new (options: { adapter: PrismaMariaDb }) => RecordedPrismaClient;

describe.runIf(up)('the MySQL writer in a Prisma transaction (@prisma/adapter-mariadb)', () => {
  let db: MysqlTestDatabase;
  let prisma: RecordedPrismaClient;
  const outbox = createMysqlOutbox();
  beforeAll(async () => {
    const { PrismaClient } = (await importPrismaClient(MYSQL_PRISMA_SCHEMA)) as {
      PrismaClient: PrismaClientClass;
    };
    db = await createMysqlTestDatabase();
    await db.pool.query('CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY, amount INT NOT NULL)');
    const url = new URL(db.url);
    prisma = new PrismaClient({
      adapter: new PrismaMariaDb({
        host: url.hostname,
        port: Number(url.port || 3306),
        user: decodeURIComponent(url.username),
        password: decodeURIComponent(url.password),
        database: db.name,
        connectionLimit: 4,
      }),
    });
  }, 60_000);
  afterAll(async () => {
    await prisma?.$disconnect();
    await db?.drop();
  });
  beforeEach(async () => {
    await db.pool.query('DELETE FROM orders');
    await db.pool.query('DELETE FROM outbox');
    await db.pool.query('DELETE FROM outbox_aggregates');
  });
  const count = async (table: string) =>
    Number(
      ((await db.pool.query(`SELECT COUNT(*) AS n FROM ${table}`))[0] as { n: number }[])[0]!.n,
    );

  it('a commit leaves the order and its messages, and the dispatcher publishes them', async () => {
    const written = await prisma.$transaction(async (tx) => {
      await tx.order.create({ data: { id: '1', amount: 5 } });
      return outbox.enqueue(fromPrismaMysql(tx), [
        { topic: 'payment.charge', aggregateId: 'order:1', payload: { amount: 5 } },
        { topic: 'mail.send', aggregateId: 'order:1', payload: { to: 'a@example.com' } },
      ]);
    });
    expect(written.map((m) => [m.topic, m.sequence])).toEqual([
      ['payment.charge', 1],
      ['mail.send', 2],
    ]);
    expect(written.every((m) => /^\d+$/.test(m.id))).toBe(true);
    expect([await count('orders'), await count('outbox')]).toEqual([1, 2]);

    const publisher = new InMemoryPublisher();
    await createMysqlDispatcher({ pool: db.pool, publisher }).drain();
    expect(publisher.published.map((m) => [m.id, m.topic, m.payload])).toEqual([
      [written[0]!.messageId, 'payment.charge', { amount: 5 }],
      [written[1]!.messageId, 'mail.send', { to: 'a@example.com' }],
    ]);
  });

  it('a rollback leaves neither the order nor the message (written on the transaction)', async () => {
    await expect(
      prisma.$transaction(async (tx) => {
        await tx.order.create({ data: { id: '2', amount: 7 } });
        await outbox.enqueue(fromPrismaMysql(tx), {
          topic: 'payment.charge',
          aggregateId: 'order:2',
          payload: { amount: 7 },
        });
        // Seen inside the transaction: the insert ran on its connection, not on another.
        const [inside] = await fromPrismaMysql(tx).query(
          "SELECT COUNT(*) AS n FROM outbox WHERE aggregate_id = 'order:2'",
        );
        expect(inside).toEqual([{ n: 1 }]);
        expect(await count('outbox')).toBe(0);
        throw new Error('the business step failed');
      }),
    ).rejects.toThrow(/business step/);
    expect([await count('orders'), await count('outbox')]).toEqual([0, 0]);
    // No sequence given away: the next message of the aggregate is its first.
    const [next] = await prisma.$transaction((tx) =>
      outbox.enqueue(fromPrismaMysql(tx), [{ topic: 't', aggregateId: 'order:2', payload: 1 }]),
    );
    expect(next!.sequence).toBe(1);
  });

  it('refuses the PrismaClient itself (each statement would commit alone), and writes nothing', async () => {
    await expect(
      outbox.enqueue(fromPrismaMysql(prisma), { topic: 't', aggregateId: 'a', payload: 1 }),
    ).rejects.toMatchObject({
      name: 'OutboxAutocommitError',
      message: expect.stringMatching(/PrismaClient itself/),
    });
    expect(await count('outbox')).toBe(0);
    // On purpose: a lone message commits by itself.
    await outbox.enqueue(
      fromPrismaMysql(prisma),
      { topic: 't', aggregateId: 'a', payload: 1 },
      { allowAutocommit: true },
    );
    expect(await count('outbox')).toBe(1);
  });

  it('expands an array value to a list, leaves a quoted ? alone, and returns no BigInt or Decimal', async () => {
    const [rows] = await fromPrismaMysql(prisma).query(
      "SELECT '?' AS mark, ? AS word, 2 IN (?) AS hit, 5 IN (?) AS miss, 9007199254740993 AS big, 7 AS small, 1.50 AS money /* ? */",
      ['w', [1, 2, 3], []],
    );
    expect(rows).toEqual([
      {
        mark: '?',
        word: 'w',
        hit: 1,
        miss: null,
        big: '9007199254740993',
        small: 7,
        money: '1.5',
      },
    ]);
    const [header] = await fromPrismaMysql(prisma).query(
      'INSERT INTO orders (id, amount) VALUES (?, ?), (?, ?)',
      ['a', 1, 'b', 2],
    );
    expect(header).toMatchObject({ affectedRows: 2 });
  });
});
