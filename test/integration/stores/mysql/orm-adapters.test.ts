import { drizzle } from 'drizzle-orm/mysql2';
import { mysqlTable, varchar } from 'drizzle-orm/mysql-core';
import { Kysely, MysqlDialect } from 'kysely';
import { createPool as createCallbackPool } from 'mysql2';
import { createPool } from 'mysql2/promise';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { MysqlQueryable } from '../../../../src/stores/mysql/mysql-connection.js';
import { fromDrizzleMysql } from '../../../../src/stores/mysql/from-drizzle-mysql.js';
import { fromKyselyMysql } from '../../../../src/stores/mysql/from-kysely-mysql.js';
import { createMysqlOutbox } from '../../../../src/stores/mysql/mysql-writer.js';
import {
  createMysqlTestDatabase,
  requireMysql,
  type MysqlTestDatabase,
} from '../../../helpers/mysql-database.js';

/**
 * Issue 45: the MySQL writer through Kysely (`MysqlDialect`) and Drizzle (`drizzle-orm/mysql2`)
 * on the MariaDB here, the same checks for each. Prisma has a file of its own
 * (from-prisma-mysql.test.ts): its client is generated, and its raw API needs more checks.
 */
const up = await requireMysql();
const orders = mysqlTable('orders', { id: varchar('id', { length: 64 }).primaryKey() });

/** One ORM on a test database: a transaction with an order row, and the ORM's non-transaction. */
interface Orm {
  /** Inserts order `id` through the ORM, then runs `fn` on the adapted transaction. */
  transaction<T>(id: string, fn: (tx: MysqlQueryable) => Promise<T>): Promise<T>;
  /** The ORM's database object adapted as if it were a transaction: must be refused. */
  outside(): MysqlQueryable;
  close(): Promise<void>;
}

const orms: { name: string; open(url: string): Orm }[] = [
  {
    name: 'Kysely (MysqlDialect)',
    open(url) {
      const kysely = new Kysely<{ orders: { id: string } }>({
        dialect: new MysqlDialect({ pool: createCallbackPool(url) }),
      });
      return {
        transaction: (id, fn) =>
          kysely.transaction().execute(async (trx) => {
            await trx.insertInto('orders').values({ id }).execute();
            return fn(fromKyselyMysql(trx));
          }),
        outside: () => fromKyselyMysql(kysely),
        close: () => kysely.destroy(),
      };
    },
  },
  {
    name: 'Drizzle (mysql2 driver)',
    open(url) {
      const pool = createPool(url);
      const orm = drizzle(pool);
      return {
        transaction: (id, fn) =>
          orm.transaction(async (tx) => {
            await tx.insert(orders).values({ id });
            return fn(fromDrizzleMysql(tx));
          }),
        outside: () => fromDrizzleMysql(orm as never),
        close: () => pool.end(),
      };
    },
  },
];

describe.runIf(up).each(orms)('the MySQL writer through $name, on MariaDB', ({ open }) => {
  let db: MysqlTestDatabase;
  let orm: Orm;
  const outbox = createMysqlOutbox();
  beforeEach(async () => {
    db = await createMysqlTestDatabase();
    await db.pool.query('CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY)');
    orm = open(db.url);
  });
  afterEach(async () => {
    await orm.close();
    await db.drop();
  });
  const count = async (table: string) =>
    Number(
      ((await db.pool.query(`SELECT COUNT(*) AS n FROM ${table}`))[0] as { n: number }[])[0]!.n,
    );

  it('writes the messages with the business row, and nothing when the transaction rolls back', async () => {
    const written = await orm.transaction('1', (tx) =>
      outbox.enqueue(tx, [
        { topic: 'payment.charge', aggregateId: 'order:1', payload: { amount: 5 } },
        { topic: 'mail.send', aggregateId: 'order:1', payload: { to: 'a@example.com' } },
      ]),
    );
    expect(written.map((m) => m.sequence)).toEqual([1, 2]);
    await expect(
      orm.transaction('2', async (tx) => {
        await outbox.enqueue(tx, { topic: 't', aggregateId: 'order:2', payload: 1 });
        throw new Error('the business step failed');
      }),
    ).rejects.toThrow(/business step/);
    expect([await count('orders'), await count('outbox')]).toEqual([1, 2]);
  });

  it('refuses the ORM object itself (each statement would commit alone), and writes nothing', async () => {
    await expect(
      outbox.enqueue(orm.outside(), { topic: 't', aggregateId: 'a', payload: 1 }),
    ).rejects.toMatchObject({ name: 'OutboxAutocommitError' });
    expect(await count('outbox')).toBe(0);
  });
});

describe('fromDrizzleMysql', () => {
  it('names what it needs when handed something that is not a Drizzle mysql2 transaction', async () => {
    await expect(
      createMysqlOutbox().enqueue(fromDrizzleMysql({} as never), {
        topic: 't',
        aggregateId: 'a',
        payload: 1,
      }),
    ).rejects.toThrow(/mysql2 client/);
  });
});
