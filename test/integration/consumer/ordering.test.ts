import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createConsumer,
  createLedger,
  pgTransactions,
  type ConsumerLedger,
  type ConsumerOptions,
  type DeliveryResult,
  type OrderCheck,
} from '../../../src/consumer/index.js';
import type { Envelope } from '../../../src/publishers/envelope.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { makeEnvelope } from '../../fixtures/consumer/envelopes.js';

let db: TestDatabase;
let ledger: ConsumerLedger;

beforeAll(async () => {
  db = await createTestDatabase();
  await db.pool.query('CREATE TABLE steps (aggregate_id text, sequence int, at serial)');
  ledger = createLedger({ runner: pgTransactions(db.pool) });
});
afterAll(() => db.drop());

type Mode = ConsumerOptions['mode'];

/** A consumer recording, per aggregate, the sequences whose effect ran, in effect order. */
function orderedConsumer(name: string, mode: Mode, check: OrderCheck) {
  const effects: number[] = [];
  const ordering = { topics: { 'order.step': check } };
  const consumer =
    mode === 'transactional'
      ? createConsumer({
          name,
          ledger,
          mode,
          ordering,
          handler: async (message, { tx }) => {
            await tx.query('INSERT INTO steps (aggregate_id, sequence) VALUES ($1, $2)', [
              message.aggregateId,
              message.sequence,
            ]);
            effects.push(message.sequence);
          },
        })
      : createConsumer({
          name,
          ledger,
          mode,
          ordering,
          handler: async (message) => {
            effects.push(message.sequence);
          },
        });
  return { consumer, effects };
}

function steps(aggregateId: string, n: number): Envelope[] {
  return Array.from({ length: n }, (_, i) =>
    makeEnvelope({ topic: 'order.step', aggregateId, sequence: i + 1 }),
  );
}

describe.each(['transactional', 'claim-first'] as const)('ordering, %s mode', (mode) => {
  it('strict: seq 2 before seq 1 is deferred, then both run in order', async () => {
    const { consumer, effects } = orderedConsumer(`strict-${mode}`, mode, 'strict');
    const [one, two] = steps(`agg-strict-${mode}`, 2);
    const early = await consumer.handle(two!);
    expect(early).toMatchObject({ action: 'retry', reason: 'early' });
    expect(early.delayMs).toBeGreaterThan(0);
    expect(effects).toEqual([]);
    expect((await consumer.handle(one!)).reason).toBe('processed');
    expect((await consumer.handle(two!)).reason).toBe('processed');
    expect(effects).toEqual([1, 2]);
    // A stale redelivery of 1 is acknowledged without running.
    expect(await consumer.handle(one!)).toMatchObject({ action: 'ack' });
    expect(effects).toEqual([1, 2]);
  });

  it('strict: a shuffled stream is processed in sequence order after redeliveries', async () => {
    const { consumer, effects } = orderedConsumer(`shuffle-${mode}`, mode, 'strict');
    const queue = steps(`agg-shuffle-${mode}`, 6);
    const order = [3, 5, 0, 4, 1, 2].map((i) => queue[i]!);
    // A broker that redelivers deferred messages at the back of the queue.
    let guard = 0;
    while (order.length > 0 && guard++ < 100) {
      const next = order.shift()!;
      const result: DeliveryResult = await consumer.handle(next);
      if (result.action === 'retry') order.push(next);
    }
    expect(effects).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it('monotonic (default): a gap does not stall, an overtaken message is acked as stale', async () => {
    const { consumer, effects } = orderedConsumer(`mono-${mode}`, mode, 'monotonic');
    const [one, two, three] = steps(`agg-mono-${mode}`, 3);
    expect((await consumer.handle(two!)).reason).toBe('processed');
    expect(await consumer.handle(one!)).toMatchObject({ action: 'ack', reason: 'stale' });
    expect((await consumer.handle(three!)).reason).toBe('processed');
    expect(effects).toEqual([2, 3]);
  });
});

it('topics not listed are not ordered', async () => {
  const { consumer, effects } = orderedConsumer('unordered', 'transactional', 'strict');
  const other = makeEnvelope({ topic: 'mail.send', sequence: 7 });
  expect((await consumer.handle(other)).reason).toBe('processed');
  expect(effects).toEqual([7]);
});

it('positions are per consumer and per aggregate', async () => {
  const a = orderedConsumer('pos-a', 'transactional', 'strict');
  const b = orderedConsumer('pos-b', 'transactional', 'strict');
  const [x1] = steps('agg-x', 1);
  const [y1, y2] = steps('agg-y', 2);
  expect((await a.consumer.handle(x1!)).reason).toBe('processed');
  expect((await a.consumer.handle(y1!)).reason).toBe('processed');
  expect((await b.consumer.handle(y2!)).reason).toBe('early');
  expect(await ledger.position('pos-a', 'agg-y')).toBe(1);
  expect(await ledger.position('pos-b', 'agg-y')).toBe(0);
});
