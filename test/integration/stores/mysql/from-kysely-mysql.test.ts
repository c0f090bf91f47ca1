import { Kysely, MysqlDialect } from 'kysely';
import { createPool } from 'mysql2';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fromKyselyMysql } from '../../../../src/stores/mysql/from-kysely-mysql.js';
import { createMysqlOutbox } from '../../../../src/stores/mysql/mysql-writer.js';
import {
  createMysqlTestDatabase,
  requireMysql,
  type MysqlTestDatabase,
} from '../../../helpers/mysql-database.js';

const up = await requireMysql();

describe.runIf(up)('the MySQL writer through Kysely (MysqlDialect on MariaDB)', () => {
  let db: MysqlTestDatabase;
  let kysely: Kysely<{ orders: { id: string } }>;
  const outbox = createMysqlOutbox();
  beforeEach(async () => {
    db = await createMysqlTestDatabase();
    await db.pool.query('CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY)');
    kysely = new Kysely({ dialect: new MysqlDialect({ pool: createPool(db.url) }) });
  });
  afterEach(async () => {
    await kysely.destroy();
    await db.drop();
  });
  const count = async (table: string) =>
    Number(
      ((await db.pool.query(`SELECT COUNT(*) AS n FROM ${table}`))[0] as { n: number }[])[0]!.n,
    );

  it('writes the message with the business row, and nothing when the transaction rolls back', async () => {
    const written = await kysely.transaction().execute(async (trx) => {
      await trx.insertInto('orders').values({ id: '1' }).execute();
      return outbox.enqueue(fromKyselyMysql(trx), [
        { topic: 'payment.charge', aggregateId: 'order:1', payload: { amount: 5 } },
        { topic: 'mail.send', aggregateId: 'order:1', payload: { to: 'a@example.com' } },
      ]);
    });
    expect(written.map((m) => m.sequence)).toEqual([1, 2]);
    await expect(
      kysely.transaction().execute(async (trx) => {
        await trx.insertInto('orders').values({ id: '2' }).execute();
        await outbox.enqueue(fromKyselyMysql(trx), {
          topic: 't',
          aggregateId: 'order:2',
          payload: 1,
        });
        throw new Error('the business step failed');
      }),
    ).rejects.toThrow(/business step/);
    expect([await count('orders'), await count('outbox')]).toEqual([1, 2]);
  });

  it('refuses the Kysely instance itself (each query would commit alone), and writes nothing', async () => {
    await expect(
      outbox.enqueue(fromKyselyMysql(kysely), { topic: 't', aggregateId: 'a', payload: 1 }),
    ).rejects.toMatchObject({ name: 'OutboxAutocommitError' });
    expect(await count('outbox')).toBe(0);
  });
});
