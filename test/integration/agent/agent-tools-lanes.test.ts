/**
 * The agent helper on the lanes engine, through a real MCP client on Postgres: an `outboxTool`
 * whose writer is `createOutbox({ engine: 'lanes' })` commits its row and its messages in one
 * transaction (or nothing), answers a repeated call from its idempotency key, holds what its
 * approval policy says; `effectStatusTool({ engine: 'lanes' })` follows the effects by key and by
 * message id — awaiting approval, pending, published, performed — while a lane dispatcher
 * publishes them.
 */
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  connectInMemory,
  createToolServer,
  effectStatusTool,
  outboxTool,
  pgPoolTransactions,
  type InMemoryToolClient,
} from '../../../src/agent/index.js';
import {
  approveMessages,
  createLaneDispatcher,
  createOutbox,
  fromPg,
  InMemoryPublisher,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { resultJson } from './notes-tool.js';

let db: TestDatabase;
let mcp: InMemoryToolClient;
const publisher = new InMemoryPublisher();

beforeAll(async () => {
  db = await createTestDatabase();
  await db.pool.query('CREATE TABLE refunds (id serial PRIMARY KEY, order_id text NOT NULL)');
  const transactions = pgPoolTransactions(db.pool);
  const refund = outboxTool({
    name: 'refund',
    description: 'Refunds an amount and mails a notice.',
    input: { order: z.string(), amount: z.number(), fail: z.boolean().optional() },
    transactions,
    outbox: createOutbox({ engine: 'lanes' }),
    approval: (message, input) => message.topic === 'payment.refund' && input.amount > 10_000,
    handler: async (input, { tx, outbox }) => {
      await tx.query('INSERT INTO refunds (order_id) VALUES ($1)', [input.order]);
      await outbox.enqueue([
        { topic: 'payment.refund', aggregateId: `order:${input.order}`, payload: input },
        { topic: 'mail.send', aggregateId: `order:${input.order}`, payload: { t: 'refunded' } },
      ]);
      if (input.fail) throw new Error('ledger unavailable');
      return { order: input.order };
    },
  });
  const status = effectStatusTool({ transactions, consumers: ['payments'], engine: 'lanes' });
  mcp = await connectInMemory(createToolServer({ name: 'shop', tools: [refund, status] }));
});
afterAll(async () => {
  await mcp?.close();
  await db?.drop();
});

const call = (name: string, args: Record<string, unknown>) =>
  mcp.client.callTool({ name, arguments: args });
const states = async (args: Record<string, unknown>) =>
  (resultJson(await call('effect_status', args)).effects as { state: string }[]).map(
    (e) => e.state,
  );
const count = async (sql: string) => Number((await db.pool.query<{ n: string }>(sql)).rows[0]!.n);
const drain = () => createLaneDispatcher({ executor: fromPg(db.pool), publisher }).drain();

describe('outboxTool and effectStatusTool on the lanes engine', () => {
  it('writes the row and the lane messages once, and follows them to performed', async () => {
    const first = resultJson(
      await call('refund', { order: '1', amount: 500, idempotency_key: 'k-1' }),
    );
    expect(first).toMatchObject({ ok: true, deduped: false });
    const again = resultJson(
      await call('refund', { order: '1', amount: 500, idempotency_key: 'k-1' }),
    );
    expect(again).toMatchObject({ ok: true, deduped: true });
    expect(await count(`SELECT count(*) AS n FROM refunds WHERE order_id = '1'`)).toBe(1);
    expect(
      await count(`SELECT count(*) AS n FROM outbox_lane_messages WHERE aggregate_id = 'order:1'`),
    ).toBe(2);
    expect(await count('SELECT count(*) AS n FROM outbox')).toBe(0);

    expect(await states({ idempotency_key: 'k-1' })).toEqual(['pending', 'pending']);
    await drain();
    const ids = first.queued.map((q: { messageId: string }) => q.messageId);
    expect(await states({ message_ids: ids })).toEqual(['published', 'published']);
    expect(publisher.published.filter((m) => ids.includes(m.id)).map((m) => m.topic)).toEqual([
      'payment.refund',
      'mail.send',
    ]);
    await db.pool.query(
      `INSERT INTO processed_messages (consumer, message_id, state) VALUES ('payments', $1, 'done')`,
      [ids[0]],
    );
    expect(await states({ message_ids: [ids[0]] })).toEqual(['performed']);
  });

  it('holds what the policy says until a person approves it; a failed call writes nothing', async () => {
    const big = resultJson(
      await call('refund', { order: '2', amount: 50_000, idempotency_key: 'k-2' }),
    );
    const [refundId, mailId] = big.queued.map((q: { messageId: string }) => q.messageId);
    expect(big.queued[0]).toMatchObject({ awaitingApproval: true });
    await drain();
    expect(await states({ message_ids: [refundId, mailId] })).toEqual([
      'awaiting approval',
      'pending',
    ]);
    expect(publisher.published.some((m) => m.id === refundId || m.id === mailId)).toBe(false);
    await approveMessages(fromPg(db.pool), [refundId], { by: 'alice', engine: 'lanes' });
    await drain();
    expect(await states({ idempotency_key: 'k-2' })).toEqual(['published', 'published']);

    const failed = await call('refund', {
      order: '3',
      amount: 1,
      fail: true,
      idempotency_key: 'k-3',
    });
    expect(failed.isError).toBe(true);
    expect(await count(`SELECT count(*) AS n FROM refunds WHERE order_id = '3'`)).toBe(0);
    expect(
      await count(`SELECT count(*) AS n FROM outbox_lane_messages WHERE aggregate_id = 'order:3'`),
    ).toBe(0);
  });
});
