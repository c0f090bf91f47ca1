import { drizzle, type MySql2Database } from 'drizzle-orm/mysql2';
import { mysqlTable, varchar } from 'drizzle-orm/mysql-core';
import { createPool, type Pool } from 'mysql2/promise';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fromDrizzleMysql } from '../../../../src/stores/mysql/from-drizzle-mysql.js';
import { createMysqlOutbox } from '../../../../src/stores/mysql/mysql-writer.js';
import {
  createMysqlTestDatabase,
  requireMysql,
  type MysqlTestDatabase,
} from '../../../helpers/mysql-database.js';

/** Issue 45: the MySQL writer through Drizzle (`drizzle-orm/mysql2`) on the MariaDB here. */
const up = await requireMysql();
const orders = mysqlTable('orders', { id: varchar('id', { length: 64 }).primaryKey() });

describe.runIf(up)('the MySQL writer through Drizzle (mysql2 driver, on MariaDB)', () => {
  let db: MysqlTestDatabase;
  let pool: Pool;
  let orm: MySql2Database;
  const outbox = createMysqlOutbox();
  beforeEach(async () => {
    db = await createMysqlTestDatabase();
    await db.pool.query('CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY)');
    pool = createPool(db.url);
    orm = drizzle(pool);
  });
  afterEach(async () => {
    await pool.end();
    await db.drop();
  });
  const count = async (table: string) =>
    Number(
      ((await db.pool.query(`SELECT COUNT(*) AS n FROM ${table}`))[0] as { n: number }[])[0]!.n,
    );

  it('writes the messages with the business row, and nothing when the transaction rolls back', async () => {
    const written = await orm.transaction(async (tx) => {
      await tx.insert(orders).values({ id: '1' });
      return outbox.enqueue(fromDrizzleMysql(tx), [
        { topic: 'payment.charge', aggregateId: 'order:1', payload: { amount: 5 } },
        { topic: 'mail.send', aggregateId: 'order:1', payload: { to: 'a@example.com' } },
      ]);
    });
    expect(written.map((m) => m.sequence)).toEqual([1, 2]);
    await expect(
      orm.transaction(async (tx) => {
        await tx.insert(orders).values({ id: '2' });
        await outbox.enqueue(fromDrizzleMysql(tx), {
          topic: 't',
          aggregateId: 'order:2',
          payload: 1,
        });
        throw new Error('the business step failed');
      }),
    ).rejects.toThrow(/business step/);
    expect([await count('orders'), await count('outbox')]).toEqual([1, 2]);
  });

  it('refuses the Drizzle database itself (each statement would commit alone), and writes nothing', async () => {
    await expect(
      outbox.enqueue(fromDrizzleMysql(orm as never), { topic: 't', aggregateId: 'a', payload: 1 }),
    ).rejects.toMatchObject({ name: 'OutboxAutocommitError' });
    await expect(
      outbox.enqueue(fromDrizzleMysql({} as never), { topic: 't', aggregateId: 'a', payload: 1 }),
    ).rejects.toThrow(/mysql2 client/);
    expect(await count('outbox')).toBe(0);
  });
});
