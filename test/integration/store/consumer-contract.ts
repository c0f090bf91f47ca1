import { beforeAll, describe, expect, it } from 'vitest';
import {
  createConsumer,
  createLedger,
  type ConsumerLedger,
  type Handler,
  type TransactionalContext,
} from '../../../src/consumer/index.js';
import { makeEnvelope } from '../../fixtures/consumer/envelopes.js';
import { count, type OrmContext } from './orm-harness.js';

/**
 * The consumer runtime's transactional mode on one ORM's runner: the effect (a charge row) is
 * written through the ORM's own transaction object, in the transaction that records the ledger
 * row, so both commit or roll back together and a redelivery performs nothing.
 */
export function describeConsumerContract<Trx>(name: string, context: () => OrmContext<Trx>): void {
  describe(`transactional consumer on ${name} transactions`, () => {
    let ledger: ConsumerLedger<Trx>;
    beforeAll(() => {
      ledger = createLedger({ runner: context().orm.consumerTransactions });
    });

    const charge: Handler<TransactionalContext<Trx>> = async (message, { trx }) => {
      await context().orm.insertCharge(trx, {
        messageId: message.id,
        amount: (message.payload as { amount: number }).amount,
      });
    };
    const ledgerRows = async (consumer: string, messageId: string) =>
      (
        await context().db.pool.query(
          'SELECT state FROM processed_messages WHERE consumer = $1 AND message_id = $2',
          [consumer, messageId],
        )
      ).rows;

    it('performs the effect once; a duplicate delivery is acked without it', async () => {
      const { db } = context();
      let calls = 0;
      const consumer = createConsumer({
        name: 'billing',
        mode: 'transactional',
        ledger,
        handler: async (message, ctx) => {
          calls += 1;
          await charge(message, ctx);
        },
      });
      const envelope = makeEnvelope();
      expect(await consumer.handle(JSON.stringify(envelope))).toMatchObject({
        action: 'ack',
        reason: 'processed',
      });
      expect(await consumer.handle(envelope)).toMatchObject({ action: 'ack', reason: 'duplicate' });
      expect(calls).toBe(1);
      expect(await count(db, 'charges', 'message_id = $1', [envelope.id])).toBe(1);
      expect(await ledgerRows('billing', envelope.id)).toEqual([{ state: 'done' }]);
    });

    it('a handler failing after the effect rolls back effect and ledger row; the redelivery performs it', async () => {
      const { db } = context();
      let fail = true;
      const consumer = createConsumer({
        name: 'billing-rollback',
        mode: 'transactional',
        ledger,
        handler: async (message, ctx) => {
          await charge(message, ctx);
          if (fail) throw new Error('downstream write failed after the effect');
        },
      });
      const envelope = makeEnvelope();
      expect(await consumer.handle(envelope, { attempt: 1 })).toMatchObject({
        action: 'retry',
        reason: 'handler-failed',
      });
      expect(await count(db, 'charges', 'message_id = $1', [envelope.id])).toBe(0);
      expect(await ledgerRows('billing-rollback', envelope.id)).toEqual([]);

      fail = false;
      expect(await consumer.handle(envelope, { attempt: 2 })).toMatchObject({
        action: 'ack',
        reason: 'processed',
      });
      expect(await count(db, 'charges', 'message_id = $1', [envelope.id])).toBe(1);
      expect(await ledgerRows('billing-rollback', envelope.id)).toEqual([{ state: 'done' }]);
    });

    it('concurrent deliveries of one message: one effect', async () => {
      const { db } = context();
      const consumer = createConsumer({
        name: 'billing-concurrent',
        mode: 'transactional',
        ledger,
        handler: async (message, ctx) => {
          await charge(message, ctx);
          // FROM pg_sleep: Prisma cannot return a column of type void.
          await ctx.tx.query('SELECT 1 FROM pg_sleep(0.1)');
        },
      });
      const envelope = makeEnvelope();
      const results = await Promise.all(Array.from({ length: 4 }, () => consumer.handle(envelope)));
      expect(results.map((r) => r.reason).sort()).toEqual([
        'duplicate',
        'duplicate',
        'duplicate',
        'processed',
      ]);
      expect(await count(db, 'charges', 'message_id = $1', [envelope.id])).toBe(1);
    });

    it('strict ordering: an early message waits, then both apply in order', async () => {
      const { db } = context();
      const consumer = createConsumer({
        name: 'billing-ordered',
        mode: 'transactional',
        ledger,
        ordering: { topics: { 'payment.charge': 'strict' } },
        handler: charge,
      });
      const aggregateId = `order:ordered-${Date.now()}`;
      const first = makeEnvelope({ aggregateId, sequence: 1 });
      const second = makeEnvelope({ aggregateId, sequence: 2 });
      expect(await consumer.handle(second)).toMatchObject({ action: 'retry', reason: 'early' });
      expect(await consumer.handle(first)).toMatchObject({ reason: 'processed' });
      expect(await consumer.handle(second)).toMatchObject({ reason: 'processed' });
      expect(await count(db, 'charges', 'message_id IN ($1, $2)', [first.id, second.id])).toBe(2);
      const { rows } = await db.pool.query(
        'SELECT last_sequence::int AS last FROM consumer_positions WHERE consumer = $1 AND aggregate_id = $2',
        ['billing-ordered', aggregateId],
      );
      expect(rows).toEqual([{ last: 2 }]);
    });
  });
}
