import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  createConsumer,
  type ConsumerLedger,
  type TransactionalContext,
} from '../../src/consumer/index.js';
import { makeEnvelope } from '../fixtures/consumer/envelopes.js';

/**
 * What the ledger conformance suite needs from a store: its consumer ledger on a fresh database
 * with a business table `charges (message_id, amount)`, and ways to look at it. Each store
 * (Postgres, SQLite, MySQL/MariaDB) implements it in a few lines, so the consumer's guarantee
 * (G5: an effect once, whatever the broker redelivers) is tested once for all of them.
 */
export interface LedgerUnderTest<Trx> {
  ledger: ConsumerLedger<Trx>;
  /** Writes one charge row through the handler's transaction (`tx` or `trx`). */
  charge(context: TransactionalContext<Trx>, messageId: string, amount: number): Promise<void>;
  /** Charge rows of one message, committed. */
  charges(messageId: string): Promise<number>;
  /** The ledger rows' states of one (consumer, message). */
  ledgerStates(consumer: string, messageId: string): Promise<string[]>;
  /** Drops the database. */
  close(): Promise<void>;
}

/** A store the suite runs on; `available: false` skips it (the target says why). */
export interface LedgerTarget<Trx> {
  name: string;
  available: boolean;
  open(): Promise<LedgerUnderTest<Trx>>;
}

const pause = () => new Promise((resolve) => setTimeout(resolve, 20));

export function describeLedgerConformance<Trx>(target: LedgerTarget<Trx>): void {
  describe.skipIf(!target.available)(`consumer ledger conformance on ${target.name}`, () => {
    let store: LedgerUnderTest<Trx>;
    beforeEach(async () => {
      store = await target.open();
    });
    afterEach(() => store.close());

    const charging = (name: string, options: { fail?: () => boolean; slow?: boolean } = {}) =>
      createConsumer({
        name,
        mode: 'transactional',
        ledger: store.ledger,
        handler: async (message, context) => {
          await store.charge(context, message.id, (message.payload as { amount: number }).amount);
          if (options.slow) await pause();
          if (options.fail?.()) throw new Error('downstream write failed after the effect');
        },
      });

    it('transactional: performs the effect once and acks a duplicate without the handler', async () => {
      const consumer = charging('billing');
      const envelope = makeEnvelope();
      expect(await consumer.handle(JSON.stringify(envelope))).toMatchObject({
        action: 'ack',
        reason: 'processed',
        messageId: envelope.id,
      });
      expect(await consumer.handle(envelope)).toMatchObject({ action: 'ack', reason: 'duplicate' });
      expect(await store.charges(envelope.id)).toBe(1);
      expect(await store.ledgerStates('billing', envelope.id)).toEqual(['done']);
    });

    it('transactional: a failed handler leaves no ledger row and no effect; the redelivery performs it', async () => {
      let fail = true;
      const consumer = charging('billing', { fail: () => fail });
      const envelope = makeEnvelope();
      expect(await consumer.handle(envelope, { attempt: 1 })).toMatchObject({
        action: 'retry',
        reason: 'handler-failed',
      });
      expect(await store.ledgerStates('billing', envelope.id)).toEqual([]);
      expect(await store.charges(envelope.id)).toBe(0);
      fail = false;
      expect((await consumer.handle(envelope, { attempt: 2 })).reason).toBe('processed');
      expect(await store.charges(envelope.id)).toBe(1);
    });

    it('transactional: concurrent deliveries of one message, one effect', async () => {
      const consumer = charging('billing', { slow: true });
      const envelope = makeEnvelope();
      const results = await Promise.all(Array.from({ length: 5 }, () => consumer.handle(envelope)));
      expect(results.map((r) => r.reason).sort()).toEqual([
        'duplicate',
        'duplicate',
        'duplicate',
        'duplicate',
        'processed',
      ]);
      expect(await store.charges(envelope.id)).toBe(1);
    });

    it('transactional: strict order per aggregate, an early message waits', async () => {
      const consumer = createConsumer({
        name: 'billing',
        mode: 'transactional',
        ledger: store.ledger,
        ordering: { topics: ['payment.charge'], check: 'strict' },
        handler: (message, context) => store.charge(context, message.id, 1),
      });
      const first = makeEnvelope({ aggregateId: 'order:1', sequence: 1 });
      const second = makeEnvelope({ aggregateId: 'order:1', sequence: 2 });
      expect((await consumer.handle(second)).action).toBe('retry');
      expect(await store.charges(second.id)).toBe(0);
      expect((await consumer.handle(first)).reason).toBe('processed');
      expect((await consumer.handle(second)).reason).toBe('processed');
      expect(await store.ledger.position('billing', 'order:1')).toBe(2);
    });

    it('claim-first: the effect once with the message id as key; a failure leaves nothing', async () => {
      const keys: string[] = [];
      let fail = true;
      const consumer = createConsumer({
        name: 'mailer',
        mode: 'claim-first',
        ledger: store.ledger,
        handler: async (_message, { idempotencyKey }) => {
          if (fail) throw new Error('the mail API is down');
          keys.push(idempotencyKey);
        },
      });
      const envelope = makeEnvelope();
      expect((await consumer.handle(envelope)).reason).toBe('handler-failed');
      expect(await store.ledger.state('mailer', envelope.id)).toBeUndefined();
      fail = false;
      expect((await consumer.handle(envelope)).reason).toBe('processed');
      expect((await consumer.handle(envelope)).reason).toBe('duplicate');
      expect(keys).toEqual([envelope.id]);
      expect(await store.ledger.state('mailer', envelope.id)).toBe('done');
    });

    it('claim-first: one of concurrent first claims wins; an ended claim is taken over and its old holder fenced', async () => {
      const { ledger } = store;
      const claims = await Promise.all(
        Array.from({ length: 6 }, () => ledger.claim('mailer', 'm-1', 60_000)),
      );
      expect(claims.filter((c) => c.status === 'acquired')).toHaveLength(1);
      expect(claims.filter((c) => c.status === 'held')).toHaveLength(5);

      const first = await ledger.claim('mailer', 'm-2', 1);
      expect(first).toMatchObject({ status: 'acquired', takeover: false });
      await pause();
      const second = await ledger.claim('mailer', 'm-2', 60_000);
      expect(second).toMatchObject({ status: 'acquired', takeover: true });
      if (first.status !== 'acquired' || second.status !== 'acquired')
        throw new Error('unreachable');
      expect(await ledger.renew('mailer', 'm-2', first.token, 60_000)).toBeUndefined();
      await ledger.release('mailer', 'm-2', first.token);
      expect(await ledger.state('mailer', 'm-2')).toBe('claimed');
      expect(await ledger.renew('mailer', 'm-2', second.token, 120_000)).toBeDefined();
      await ledger.complete('mailer', 'm-2', { aggregateId: 'order:1', sequence: 3 });
      expect(await ledger.position('mailer', 'order:1')).toBe(3);
      expect(await ledger.claim('mailer', 'm-2', 60_000)).toEqual({ status: 'done' });
    });
  });
}
