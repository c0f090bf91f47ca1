import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createConsumer,
  createLedger,
  DeferError,
  PermanentError,
  pgTransactions,
  type ConsumerLedger,
} from '../../../src/consumer/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { makeEnvelope } from '../../fixtures/consumer/envelopes.js';

let db: TestDatabase;
let ledger: ConsumerLedger;

beforeAll(async () => {
  db = await createTestDatabase();
  ledger = createLedger({ runner: pgTransactions(db.pool) });
});
afterAll(() => db.drop());

describe('claim-first consumer', () => {
  it('hands the message id to the handler as idempotency key and records done', async () => {
    const keys: string[] = [];
    const consumer = createConsumer({
      name: 'mailer',
      mode: 'claim-first',
      ledger,
      handler: async (_message, { idempotencyKey, takeover }) => {
        expect(takeover).toBe(false);
        keys.push(idempotencyKey);
      },
    });
    const envelope = makeEnvelope();
    expect((await consumer.handle(envelope)).reason).toBe('processed');
    expect((await consumer.handle(envelope)).reason).toBe('duplicate');
    expect(keys).toEqual([envelope.id]);
    expect(await ledger.state('mailer', envelope.id)).toBe('done');
  });

  it('a live claim held by another delivery defers this one until about the lease end', async () => {
    const envelope = makeEnvelope();
    const claim = await ledger.claim('mailer-held', envelope.id, 60_000);
    expect(claim.status).toBe('acquired');
    let calls = 0;
    const consumer = createConsumer({
      name: 'mailer-held',
      mode: 'claim-first',
      ledger,
      handler: async () => {
        calls += 1;
      },
    });
    const result = await consumer.handle(envelope);
    expect(result).toMatchObject({ action: 'retry', reason: 'claimed-elsewhere' });
    expect(result.delayMs).toBeGreaterThan(50_000);
    expect(calls).toBe(0);
  });

  it('a handler failure releases the claim and surfaces as retry; the next delivery runs', async () => {
    let fail = true;
    const consumer = createConsumer({
      name: 'mailer-fail',
      mode: 'claim-first',
      ledger,
      handler: async () => {
        if (fail) throw new Error('SMTP 451 try later, token=abc123secret');
      },
    });
    const envelope = makeEnvelope();
    const first = await consumer.handle(envelope);
    expect(first).toMatchObject({ action: 'retry', reason: 'handler-failed' });
    expect(first.detail).not.toContain('abc123secret');
    expect(await ledger.state('mailer-fail', envelope.id)).toBeUndefined();
    fail = false;
    expect((await consumer.handle(envelope)).reason).toBe('processed');
  });

  it('PermanentError → dead, DeferError → retry with its delay; neither leaves a claim', async () => {
    const permanent = makeEnvelope();
    const deferred = makeEnvelope();
    const consumer = createConsumer({
      name: 'mailer-errors',
      mode: 'claim-first',
      ledger,
      handler: async (message) => {
        if (message.id === permanent.id) throw new PermanentError('address rejected');
        throw new DeferError('provider in maintenance', 42_000);
      },
    });
    expect(await consumer.handle(permanent)).toMatchObject({
      action: 'dead',
      reason: 'permanent-failure',
    });
    expect(await consumer.handle(deferred)).toMatchObject({
      action: 'retry',
      reason: 'deferred',
      delayMs: 42_000,
    });
    expect(await ledger.state('mailer-errors', permanent.id)).toBeUndefined();
    expect(await ledger.state('mailer-errors', deferred.id)).toBeUndefined();
  });

  it('an expired claim is taken over, and the old holder cannot release or renew it', async () => {
    const envelope = makeEnvelope();
    const old = await ledger.claim('mailer-fence', envelope.id, 1);
    if (old.status !== 'acquired') throw new Error('expected a claim');
    await db.pool.query('SELECT pg_sleep(0.01)');
    const fresh = await ledger.claim('mailer-fence', envelope.id, 60_000);
    expect(fresh).toMatchObject({ status: 'acquired', takeover: true });
    await ledger.release('mailer-fence', envelope.id, old.token);
    expect(await ledger.renew('mailer-fence', envelope.id, old.token, 60_000)).toBeUndefined();
    expect(await ledger.state('mailer-fence', envelope.id)).toBe('claimed');
  });

  it('the heartbeat renews the lease of a slow handler, so no other delivery takes over', async () => {
    const envelope = makeEnvelope();
    let release!: () => void;
    const running = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const hasStarted = new Promise<void>((resolve) => (started = resolve));
    const consumer = createConsumer({
      name: 'mailer-slow',
      mode: 'claim-first',
      ledger,
      leaseMs: 300,
      handler: async () => {
        started();
        await running;
      },
    });
    const slow = consumer.handle(envelope);
    await hasStarted;
    // Three lease lengths later the claim must still be live (renewed every 100 ms).
    await new Promise((resolve) => setTimeout(resolve, 900));
    expect(await ledger.claim('mailer-slow', envelope.id, 300)).toMatchObject({ status: 'held' });
    release();
    expect((await slow).reason).toBe('processed');
  });
});
