import { Kysely, PostgresDialect, sql, type Generated } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOutbox, fromKysely } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';

interface Database {
  orders: { id: Generated<number>; user_id: string; amount: number; idempotency_key: string };
  outbox: { id: string; topic: string; aggregate_id: string };
}

let db: TestDatabase;
let kysely: Kysely<Database>;
const outbox = createOutbox();

beforeAll(async () => {
  db = await createTestDatabase();
  kysely = new Kysely<Database>({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: db.url }) }),
  });
  await sql`CREATE TABLE orders (id serial PRIMARY KEY, user_id text NOT NULL, amount int NOT NULL, idempotency_key text UNIQUE)`.execute(
    kysely,
  );
});
afterAll(async () => {
  await kysely.destroy();
  await db.drop();
});

const outboxCount = async () =>
  Number(
    (
      await kysely
        .selectFrom('outbox')
        .select(sql<string>`count(*)`.as('n'))
        .executeTakeFirstOrThrow()
    ).n,
  );

describe('enqueue with Kysely', () => {
  it('commits the order and its two side effects together', async () => {
    const messages = await kysely.transaction().execute(async (trx) => {
      const order = await trx
        .insertInto('orders')
        .values({ user_id: 'u1', amount: 1200, idempotency_key: 'k1' })
        .returning('id')
        .executeTakeFirstOrThrow();
      return outbox.enqueue(fromKysely(trx), [
        {
          topic: 'payment.charge',
          aggregateId: `order:${order.id}`,
          payload: { orderId: order.id, amount: 1200 },
        },
        { topic: 'mail.send', aggregateId: `order:${order.id}`, payload: { template: 'receipt' } },
      ]);
    });
    expect(messages.map((m) => m.topic)).toEqual(['payment.charge', 'mail.send']);
    expect(messages.map((m) => m.sequence)).toEqual([1, 2]);
    expect(await outboxCount()).toBe(2);
  });

  it('contract (a): a throw after the second insert leaves no order and no outbox row (G1)', async () => {
    const before = await outboxCount();
    await expect(
      kysely.transaction().execute(async (trx) => {
        const order = await trx
          .insertInto('orders')
          .values({ user_id: 'u2', amount: 500, idempotency_key: 'k2' })
          .returning('id')
          .executeTakeFirstOrThrow();
        await outbox.enqueue(fromKysely(trx), {
          topic: 'payment.charge',
          aggregateId: `order:${order.id}`,
          payload: {},
        });
        await outbox.enqueue(fromKysely(trx), {
          topic: 'mail.send',
          aggregateId: `order:${order.id}`,
          payload: {},
        });
        throw new Error('payment provider config missing');
      }),
    ).rejects.toThrow(/config missing/);
    expect(await outboxCount()).toBe(before);
    const orders = await kysely
      .selectFrom('orders')
      .selectAll()
      .where('idempotency_key', '=', 'k2')
      .execute();
    expect(orders).toEqual([]);
  });
});
