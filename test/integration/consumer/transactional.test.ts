import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createConsumer,
  createLedger,
  PermanentError,
  pgTransactions,
  type ConsumerLedger,
  type Handler,
  type TransactionalContext,
} from '../../../src/consumer/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { makeEnvelope } from '../../fixtures/consumer/envelopes.js';

let db: TestDatabase;
let ledger: ConsumerLedger;

beforeAll(async () => {
  db = await createTestDatabase();
  await db.pool.query('CREATE TABLE charges (message_id text NOT NULL, amount int NOT NULL)');
  ledger = createLedger({ runner: pgTransactions(db.pool) });
});
afterAll(() => db.drop());

const charge: Handler<TransactionalContext> = async (message, { tx }) => {
  await tx.query('INSERT INTO charges (message_id, amount) VALUES ($1, $2)', [
    message.id,
    (message.payload as { amount: number }).amount,
  ]);
};

async function charges(messageId: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM charges WHERE message_id = $1',
    [messageId],
  );
  return rows[0]!.n;
}

async function ledgerRows(consumer: string, messageId: string) {
  const { rows } = await db.pool.query(
    'SELECT state FROM processed_messages WHERE consumer = $1 AND message_id = $2',
    [consumer, messageId],
  );
  return rows;
}

describe('transactional consumer', () => {
  it('performs the effect once and acks duplicates without calling the handler', async () => {
    let calls = 0;
    const consumer = createConsumer({
      name: 'billing',
      mode: 'transactional',
      ledger,
      handler: async (message, context) => {
        calls += 1;
        await charge(message, context);
      },
    });
    const envelope = makeEnvelope();
    expect(await consumer.handle(JSON.stringify(envelope))).toMatchObject({
      action: 'ack',
      reason: 'processed',
      messageId: envelope.id,
    });
    expect(await consumer.handle(envelope)).toMatchObject({ action: 'ack', reason: 'duplicate' });
    expect(calls).toBe(1);
    expect(await charges(envelope.id)).toBe(1);
    expect(await ledgerRows('billing', envelope.id)).toEqual([{ state: 'done' }]);
  });

  it('rollback: a failing handler leaves no ledger row and no effect; the redelivery performs it', async () => {
    let fail = true;
    const consumer = createConsumer({
      name: 'billing-rollback',
      mode: 'transactional',
      ledger,
      handler: async (message, context) => {
        await charge(message, context);
        if (fail) throw new Error('downstream write failed after the effect');
      },
    });
    const envelope = makeEnvelope();
    const first = await consumer.handle(envelope, { attempt: 1 });
    expect(first).toMatchObject({ action: 'retry', reason: 'handler-failed' });
    expect(first.detail).toMatch(/downstream write failed/);
    expect(first.delayMs).toBeGreaterThan(0);
    expect(await ledgerRows('billing-rollback', envelope.id)).toEqual([]);
    expect(await charges(envelope.id)).toBe(0);

    fail = false;
    expect(await consumer.handle(envelope, { attempt: 2 })).toMatchObject({
      action: 'ack',
      reason: 'processed',
    });
    expect(await charges(envelope.id)).toBe(1);
    expect(await ledgerRows('billing-rollback', envelope.id)).toEqual([{ state: 'done' }]);
  });

  it('two consumer names each perform their own effect once', async () => {
    const envelope = makeEnvelope();
    for (const name of ['ledger-a', 'ledger-b']) {
      const consumer = createConsumer({ name, mode: 'transactional', ledger, handler: charge });
      expect((await consumer.handle(envelope)).reason).toBe('processed');
      expect((await consumer.handle(envelope)).reason).toBe('duplicate');
    }
    expect(await charges(envelope.id)).toBe(2);
  });

  it('concurrent deliveries in one process: one effect', async () => {
    const consumer = createConsumer({
      name: 'billing-concurrent',
      mode: 'transactional',
      ledger,
      handler: async (message, context) => {
        await charge(message, context);
        await context.tx.query('SELECT pg_sleep(0.1)');
      },
    });
    const envelope = makeEnvelope();
    const results = await Promise.all(Array.from({ length: 5 }, () => consumer.handle(envelope)));
    expect(results.map((r) => r.reason).sort()).toEqual([
      'duplicate',
      'duplicate',
      'duplicate',
      'duplicate',
      'processed',
    ]);
    expect(await charges(envelope.id)).toBe(1);
  });

  it('poison: a bad body and a PermanentError go dead, and the consumer keeps working', async () => {
    const consumer = createConsumer({
      name: 'billing-poison',
      mode: 'transactional',
      ledger,
      handler: async (message, context) => {
        if ((message.payload as { amount?: unknown }).amount === undefined)
          throw new PermanentError('payload has no amount');
        await charge(message, context);
      },
    });
    expect(await consumer.handle('{not json')).toMatchObject({ action: 'dead', reason: 'poison' });
    expect(await consumer.handle(JSON.stringify({ id: 'x' }))).toMatchObject({
      action: 'dead',
      reason: 'poison',
    });
    expect(await consumer.handle(new Uint8Array([0xff, 0xfe]))).toMatchObject({ action: 'dead' });
    const noAmount = makeEnvelope({ payload: {} });
    expect(await consumer.handle(noAmount)).toMatchObject({
      action: 'dead',
      reason: 'permanent-failure',
      detail: 'payload has no amount',
    });
    expect(await ledgerRows('billing-poison', noAmount.id)).toEqual([]);
    const good = makeEnvelope();
    expect(await consumer.handle(good)).toMatchObject({ action: 'ack', reason: 'processed' });
    expect(await charges(good.id)).toBe(1);
  });

  it('maxAttempts turns a repeated failure into a dead letter', async () => {
    const consumer = createConsumer({
      name: 'billing-max',
      mode: 'transactional',
      ledger,
      maxAttempts: 3,
      handler: async () => {
        throw new Error('still broken');
      },
    });
    const envelope = makeEnvelope();
    expect((await consumer.handle(envelope, { attempt: 2 })).action).toBe('retry');
    expect(await consumer.handle(envelope, { attempt: 3 })).toMatchObject({
      action: 'dead',
      reason: 'max-attempts',
    });
  });

  it('a database outage is a retry, not a crash and not an ack', async () => {
    const broken = createLedger({
      runner: {
        query: async () => {
          throw new Error('connect ECONNREFUSED');
        },
        transaction: async () => {
          throw new Error('connect ECONNREFUSED');
        },
      },
    });
    let calls = 0;
    const consumer = createConsumer({
      name: 'billing-down',
      mode: 'transactional',
      ledger: broken,
      handler: async () => {
        calls += 1;
      },
    });
    expect(await consumer.handle(makeEnvelope())).toMatchObject({
      action: 'retry',
      reason: 'ledger-failed',
    });
    expect(calls).toBe(0);
  });
});
