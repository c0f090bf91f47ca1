import { describe, expect, it } from 'vitest';
import {
  createOutbox,
  OutboxAutocommitError,
  OutboxValidationError,
  type OutboxMessage,
} from '../../../src/index.js';
import { count, type OrmContext } from './orm-harness.js';

const outbox = createOutbox();

/** Thrown inside a transaction to make the ORM roll it back. */
class Rollback extends Error {}

/**
 * The writer on one ORM's transaction (issue 17): commit and rollback atomicity of the business
 * row and its outbox rows, batches of 1 and 500, bad input rejected with nothing written, and
 * rows read back the way `fromPg` reads them.
 */
export function describeEnqueueContract<Trx>(name: string, context: () => OrmContext<Trx>): void {
  describe(`enqueue through ${name}`, () => {
    it('commit: the order (written through the ORM) and both its messages are there', async () => {
      const { db, orm } = context();
      const { orderId, messages } = await orm.transaction(async (trx) => {
        const orderId = await orm.insertOrder(trx, { userId: 'u-commit', amount: 1200 });
        const messages = await outbox.enqueue(orm.executor(trx), [
          {
            topic: 'payment.charge',
            aggregateId: `order:${orderId}`,
            payload: { orderId, amount: 1200 },
          },
          { topic: 'mail.send', aggregateId: `order:${orderId}`, payload: { template: 'receipt' } },
        ]);
        return { orderId, messages };
      });
      expect(messages.map((m) => [m.topic, m.sequence])).toEqual([
        ['payment.charge', 1],
        ['mail.send', 2],
      ]);
      expect(messages.every((m) => /^\d+$/.test(m.id))).toBe(true);
      expect(await count(db, 'orders', 'id = $1', [orderId])).toBe(1);
      // The payload arrived as a jsonb object, not as a JSON string holding one (a driver that
      // JSON.stringify-s a string parameter would store the latter).
      const { rows } = await db.pool.query(
        `SELECT topic, jsonb_typeof(payload) AS kind, payload, headers->>'schema_version' AS v
           FROM outbox WHERE aggregate_id = $1 ORDER BY sequence`,
        [`order:${orderId}`],
      );
      expect(rows).toEqual([
        { topic: 'payment.charge', kind: 'object', payload: { orderId, amount: 1200 }, v: '1' },
        { topic: 'mail.send', kind: 'object', payload: { template: 'receipt' }, v: '1' },
      ]);
    });

    it('rollback: a throw after the enqueue leaves neither the order nor a message', async () => {
      const { db, orm } = context();
      const before = await count(db, 'outbox');
      let orderId = 0;
      await expect(
        orm.transaction(async (trx) => {
          orderId = await orm.insertOrder(trx, { userId: 'u-rollback', amount: 500 });
          await outbox.enqueue(orm.executor(trx), [
            { topic: 'payment.charge', aggregateId: `order:${orderId}`, payload: {} },
            { topic: 'mail.send', aggregateId: `order:${orderId}`, payload: {} },
          ]);
          // Both were written inside the transaction: the rollback, not a failed insert, is what
          // makes them vanish.
          const inside = await orm
            .executor(trx)
            .query<{ n: string }>('SELECT count(*) AS n FROM outbox WHERE aggregate_id = $1', [
              `order:${orderId}`,
            ]);
          expect(inside.rows[0]!.n).toBe('2');
          throw new Rollback('payment provider rejected the card');
        }),
      ).rejects.toThrow(Rollback);
      expect(orderId).toBeGreaterThan(0);
      expect(await count(db, 'orders', 'id = $1', [orderId])).toBe(0);
      expect(await count(db, 'outbox')).toBe(before);
    });

    it("the ORM's top-level object, outside a transaction, is refused with nothing written", async () => {
      const { db, orm } = context();
      const aggregateId = `autocommit:${name}`;
      const error = await outbox
        .enqueue(orm.outsideExecutor(), { topic: 'mail.send', aggregateId, payload: {} })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxAutocommitError);
      expect((error as OutboxAutocommitError).code).toBe('OUTBOX_AUTOCOMMIT');
      expect((error as Error).message).toMatch(/wrote nothing.*allowAutocommit/s);
      // An empty batch on it is the same mistake.
      await expect(outbox.enqueue(orm.outsideExecutor(), [])).rejects.toThrow(
        OutboxAutocommitError,
      );
      expect(await count(db, 'outbox', 'aggregate_id = $1', [aggregateId])).toBe(0);
      // The transaction object of the same ORM is not refused (the other tests), and the opt-in
      // writes a lone message that commits by itself.
      const [lone] = await outbox.enqueue(
        orm.outsideExecutor(),
        [{ topic: 'mail.send', aggregateId, payload: {} }],
        { allowAutocommit: true },
      );
      expect(lone).toMatchObject({ aggregateId, sequence: 1 });
      expect(await count(db, 'outbox', 'aggregate_id = $1', [aggregateId])).toBe(1);
    });

    it('a batch of 1', async () => {
      const { db, orm } = context();
      const [message] = await orm.transaction(async (trx) => {
        const orderId = await orm.insertOrder(trx, { userId: 'u-one', amount: 1 });
        return outbox.enqueue(orm.executor(trx), [
          { topic: 'order.created', aggregateId: `order:${orderId}`, payload: { n: 1 } },
        ]);
      });
      expect(message).toMatchObject({ topic: 'order.created', sequence: 1 });
      expect(
        await count(db, 'outbox', 'id = $1 AND topic = $2', [message!.id, 'order.created']),
      ).toBe(1);
    });

    it('a batch of 500 across 50 aggregates: all rows, in input order, sequenced per aggregate', async () => {
      const { db, orm } = context();
      const tag = `b500-${Date.now()}`;
      const batch: OutboxMessage[] = Array.from({ length: 500 }, (_, i) => ({
        topic: 'bulk.item',
        // Interleaved aggregates: the writer sorts them for its locks, the answer must not be.
        aggregateId: `${tag}:${i % 50}`,
        payload: { i, text: `item ${i} "quoted" \\ é` },
      }));
      const messages = await orm.transaction(async (trx) => {
        await orm.insertOrder(trx, { userId: tag, amount: 500 });
        return outbox.enqueue(orm.executor(trx), batch);
      });
      expect(messages).toHaveLength(500);
      expect(messages.map((m) => m.aggregateId)).toEqual(batch.map((m) => m.aggregateId));
      expect(messages.map((m) => m.sequence)).toEqual(batch.map((_, i) => Math.floor(i / 50) + 1));
      const { rows } = await db.pool.query<{ n: number; ok: number }>(
        `SELECT count(*)::int AS n,
                count(*) FILTER (WHERE payload->>'text' = 'item ' || (payload->>'i') || ' "quoted" \\ é')::int AS ok
           FROM outbox WHERE aggregate_id LIKE $1`,
        [`${tag}:%`],
      );
      expect(rows[0]).toEqual({ n: 500, ok: 500 });
      expect(await count(db, 'orders', 'user_id = $1', [tag])).toBe(1);
    });

    it('bad input (an empty topic) is an OutboxValidationError and writes no message', async () => {
      const { db, orm } = context();
      const before = await count(db, 'outbox');
      const { orderId, error } = await orm.transaction(async (trx) => {
        const orderId = await orm.insertOrder(trx, { userId: 'u-bad-topic', amount: 7 });
        const error = await outbox
          .enqueue(orm.executor(trx), [
            { topic: 'ok.topic', aggregateId: `order:${orderId}`, payload: {} },
            { topic: '', aggregateId: `order:${orderId}`, payload: {} },
          ])
          .catch((e: unknown) => e);
        // The caller chose to commit anyway: the valid first message must not have slipped in.
        return { orderId, error };
      });
      expect(error).toBeInstanceOf(OutboxValidationError);
      expect((error as OutboxValidationError).field).toBe('messages[1].topic');
      expect(await count(db, 'orders', 'id = $1', [orderId])).toBe(1);
      expect(await count(db, 'outbox')).toBe(before);
    });

    it('bad input (a payload JSON cannot hold) rolls back with the transaction it ends', async () => {
      const { db, orm } = context();
      const before = await count(db, 'outbox');
      let orderId = 0;
      const failure = await orm
        .transaction(async (trx) => {
          orderId = await orm.insertOrder(trx, { userId: 'u-bad-payload', amount: 8 });
          await outbox.enqueue(orm.executor(trx), {
            topic: 'payment.charge',
            aggregateId: `order:${orderId}`,
            payload: { amount: 10n } as never,
          });
        })
        .catch((e: unknown) => e);
      expect(failure).toBeInstanceOf(OutboxValidationError);
      expect((failure as OutboxValidationError).field).toBe('messages[0].payload.amount');
      expect(await count(db, 'orders', 'id = $1', [orderId])).toBe(0);
      expect(await count(db, 'outbox')).toBe(before);
    });

    it('reads rows back as fromPg does: int8 as a string, jsonb parsed, jsonb text parameters kept', async () => {
      const { orm } = context();
      const { rows } = await orm.transaction((trx) =>
        orm.executor(trx).query<{ big: unknown; doc: unknown; kind: unknown; n: unknown }>(
          `SELECT 9007199254740993::int8 AS big, $1::jsonb AS doc, jsonb_typeof($1::jsonb) AS kind,
                    $2::int AS n`,
          ['{"a":[1,2],"b":"x"}', 42],
        ),
      );
      expect(rows).toEqual([
        { big: '9007199254740993', doc: { a: [1, 2], b: 'x' }, kind: 'object', n: 42 },
      ]);
    });

    it("the writer's INSERT is a prepared statement exactly where this client prepares", async () => {
      const { orm } = context();
      const prepared = await orm.transaction(async (trx) => {
        const orderId = await orm.insertOrder(trx, { userId: 'u-prepared', amount: 3 });
        await outbox.enqueue(orm.executor(trx), {
          topic: 'order.created',
          aggregateId: `order:${orderId}`,
          payload: {},
        });
        // Same connection as the INSERT: prepared statements live per connection.
        const { rows } = await orm
          .executor(trx)
          .query<{ n: string }>(
            `SELECT count(*) AS n FROM pg_prepared_statements WHERE statement LIKE '%jsonb_array_elements($1::jsonb)%'`,
          );
        return Number(rows[0]!.n);
      });
      expect(prepared).toBe(orm.preparesInsert ? 1 : 0);
    });
  });
}
