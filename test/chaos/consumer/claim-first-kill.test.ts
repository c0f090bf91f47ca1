import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createConsumer,
  createLedger,
  pgTransactions,
  type DeliveryResult,
} from '../../../src/consumer/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { startConsumerChild } from '../../fixtures/consumer/child.js';
import { makeEnvelope } from '../../fixtures/consumer/envelopes.js';
import { startFakeApi, type FakeApi } from '../../fixtures/consumer/fake-api.js';

let db: TestDatabase;
let api: FakeApi;

beforeAll(async () => {
  db = await createTestDatabase();
  api = await startFakeApi();
});
afterAll(async () => {
  await api.close();
  await db.drop();
});

describe('claim-first: kill -9 between the external effect and the ledger write', () => {
  it('the retry after the lease sends the same idempotency key, and the API acts once', async () => {
    const envelope = makeEnvelope({ topic: 'payment.charge' });
    const leaseMs = 1_500;
    const child = startConsumerChild({
      DATABASE_URL: db.url,
      MODE: 'claim-first',
      CONSUMER: 'payments',
      API_URL: api.url,
      LEASE_MS: String(leaseMs),
      HANG_AFTER_EFFECT: '1',
      ENVELOPE: JSON.stringify(envelope),
    });
    await child.waitFor('ready');
    child.process.stdin!.write('go\n');
    await child.waitFor('effect-done');
    process.kill(child.process.pid!, 'SIGKILL');
    expect(await child.exited).toBe('SIGKILL');

    const { rows } = await db.pool.query(
      'SELECT state FROM processed_messages WHERE consumer = $1 AND message_id = $2',
      ['payments', envelope.id],
    );
    expect(rows).toEqual([{ state: 'claimed' }]);

    const takeovers: boolean[] = [];
    const consumer = createConsumer({
      name: 'payments',
      mode: 'claim-first',
      leaseMs,
      ledger: createLedger({ runner: pgTransactions(db.pool) }),
      handler: async (_message, { idempotencyKey, takeover }) => {
        takeovers.push(takeover);
        const response = await fetch(api.url, {
          method: 'POST',
          headers: { 'idempotency-key': idempotencyKey },
        });
        if (!response.ok) throw new Error(`API answered ${response.status}`);
      },
    });
    // The broker redelivers; while the dead process's lease lasts the delivery is deferred.
    const results: DeliveryResult[] = [];
    for (;;) {
      const result = await consumer.handle(envelope, { attempt: results.length + 2 });
      results.push(result);
      if (result.action !== 'retry') break;
      expect(result.reason).toBe('claimed-elsewhere');
      await new Promise((resolve) => setTimeout(resolve, result.delayMs));
    }
    expect(results.at(-1)).toMatchObject({ action: 'ack', reason: 'processed' });
    expect(results[0]).toMatchObject({ action: 'retry', reason: 'claimed-elsewhere' });
    expect(takeovers).toEqual([true]);
    expect(api.calls).toEqual([envelope.id, envelope.id]);
    expect(api.effects).toEqual([envelope.id]);
    const after = await db.pool.query(
      'SELECT state FROM processed_messages WHERE consumer = $1 AND message_id = $2',
      [`payments`, envelope.id],
    );
    expect(after.rows).toEqual([{ state: 'done' }]);
  });
});
