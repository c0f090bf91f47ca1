import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  createBudgetBreaker,
  createConsumer,
  createLedger,
  pgTransactions,
  withBudget,
  type ClaimFirstContext,
} from '../../../src/consumer/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { makeEnvelope } from '../../fixtures/consumer/envelopes.js';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

it('budget exceeded → deferred (not failed, no ledger row), processed after the window', async () => {
  let now = 0;
  const breaker = createBudgetBreaker({ windowMs: 60_000, maxSpend: 100, now: () => now });
  const llmCalls: string[] = [];
  const consumer = createConsumer({
    name: 'summariser',
    mode: 'claim-first',
    ledger: createLedger({ runner: pgTransactions(db.pool) }),
    handler: withBudget<ClaimFirstContext>(breaker, async (message, { reportSpend }) => {
      llmCalls.push(message.id);
      reportSpend(80); // tokens used by this (fake) Claude call
    }),
  });
  const [a, b, c] = [makeEnvelope(), makeEnvelope(), makeEnvelope()];
  expect((await consumer.handle(a)).reason).toBe('processed');
  expect((await consumer.handle(b)).reason).toBe('processed'); // 160 >= 100: breaker opens
  now = 15_000;
  const deferred = await consumer.handle(c);
  expect(deferred).toMatchObject({ action: 'retry', reason: 'deferred', delayMs: 45_000 });
  expect(llmCalls).toEqual([a.id, b.id]);
  const { rows } = await db.pool.query('SELECT 1 FROM processed_messages WHERE message_id = $1', [
    c.id,
  ]);
  expect(rows).toEqual([]);

  now = 60_000;
  expect(await consumer.handle(c)).toMatchObject({ action: 'ack', reason: 'processed' });
  expect(llmCalls).toEqual([a.id, b.id, c.id]);
  breaker.dispose();
});
