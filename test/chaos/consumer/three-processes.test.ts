import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createConsumer, createLedger, pgTransactions } from '../../../src/consumer/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { startConsumerChild } from '../../fixtures/consumer/child.js';
import { makeEnvelope } from '../../fixtures/consumer/envelopes.js';
import { startFakeApi, type FakeApi } from '../../fixtures/consumer/fake-api.js';

let db: TestDatabase;
let api: FakeApi;

beforeAll(async () => {
  db = await createTestDatabase();
  await db.pool.query('CREATE TABLE effects (message_id text NOT NULL, pid int NOT NULL)');
  api = await startFakeApi();
});
afterAll(async () => {
  await api.close();
  await db.drop();
});

/** Starts `n` consumer processes on the same delivery and releases them at the same moment. */
async function race(n: number, env: Record<string, string>) {
  const children = Array.from({ length: n }, () =>
    startConsumerChild({ DATABASE_URL: db.url, ...env }),
  );
  await Promise.all(children.map((child) => child.waitFor('ready')));
  for (const child of children) child.process.stdin!.write('go\n');
  const results = await Promise.all(children.map((child) => child.waitFor('result')));
  await Promise.all(children.map((child) => child.exited));
  return results;
}

describe('the same message delivered to 3 consumer processes at once (G5)', () => {
  it('transactional: the effect row is written once, the other deliveries ack as duplicates', async () => {
    const envelope = makeEnvelope();
    const results = await race(3, {
      MODE: 'transactional',
      CONSUMER: 'billing',
      ENVELOPE: JSON.stringify(envelope),
    });
    const { rows } = await db.pool.query('SELECT * FROM effects WHERE message_id = $1', [
      envelope.id,
    ]);
    expect(rows).toHaveLength(1);
    expect(results.map((r) => r.action)).toEqual(['ack', 'ack', 'ack']);
    expect(results.map((r) => r.reason).sort()).toEqual(['duplicate', 'duplicate', 'processed']);
  });

  it('claim-first: the API is called once; the others defer or ack, and a redelivery acks', async () => {
    const envelope = makeEnvelope({ topic: 'mail.send' });
    const results = await race(3, {
      MODE: 'claim-first',
      CONSUMER: 'mailer',
      API_URL: api.url,
      ENVELOPE: JSON.stringify(envelope),
    });
    expect(api.calls.filter((key) => key === envelope.id)).toHaveLength(1);
    expect(results.filter((r) => r.reason === 'processed')).toHaveLength(1);
    for (const other of results.filter((r) => r.reason !== 'processed')) {
      // Still claimed when it looked: retry after the lease; already done: ack.
      expect(
        (other.action === 'retry' && other.reason === 'claimed-elsewhere') ||
          (other.action === 'ack' && other.reason === 'duplicate'),
      ).toBe(true);
    }
    // The deferred deliveries come back and find the effect recorded.
    const consumer = createConsumer({
      name: 'mailer',
      mode: 'claim-first',
      ledger: createLedger({ runner: pgTransactions(db.pool) }),
      handler: async () => {
        throw new Error('must not run again');
      },
    });
    expect(await consumer.handle(envelope)).toMatchObject({ action: 'ack', reason: 'duplicate' });
    expect(api.calls.filter((key) => key === envelope.id)).toHaveLength(1);
  });
});
