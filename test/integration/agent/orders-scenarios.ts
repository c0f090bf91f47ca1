import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { connectInMemory, type InMemoryToolClient } from '../../../src/agent/index.js';
import type { OutgoingMessage } from '../../../src/index.js';
import {
  createOrdersExample,
  type OrdersExample,
  type OrdersExampleOptions,
} from '../../../examples/orders/index.js';
import { resultJson, resultWords } from './notes-tool.js';

/**
 * The orders example's behaviour, run against one database kind (pg or PGlite): the tools through
 * a real MCP client, then the consumers on the committed messages.
 */
export function ordersScenarios(
  openDatabase: () => Promise<{
    database: OrdersExampleOptions['database'];
    close(): Promise<void>;
  }>,
) {
  let example: OrdersExample;
  let mcp: InMemoryToolClient;
  let closeDatabase: () => Promise<void>;
  let mailboxDir: string;
  let messagesTable: 'outbox' | 'outbox_lane_messages';

  beforeAll(async () => {
    const opened = await openDatabase();
    closeDatabase = opened.close;
    mailboxDir = await mkdtemp(join(tmpdir(), 'orders-mailbox-'));
    example = createOrdersExample({
      database: opened.database,
      mailboxDir,
      injectFailure: (_tool, input) => (input as { user_id?: string }).user_id === 'fail-midway',
    });
    await example.setup();
    // The engine's own table: a new schema (PGlite here) runs on lanes, the test template claims.
    const { rows } = await sql<{ engine: string }>`SELECT engine FROM outbox_engine`.execute(
      example.db,
    );
    messagesTable = rows[0]?.engine === 'lanes' ? 'outbox_lane_messages' : 'outbox';
    mcp = await connectInMemory(example.createServer());
  });
  afterAll(async () => {
    await mcp?.close();
    await example?.close();
    await closeDatabase?.();
    if (mailboxDir) await rm(mailboxDir, { recursive: true, force: true });
  });

  const order = (key: string, overrides: Record<string, unknown> = {}) => ({
    user_id: 'u1',
    email: 'alice@example.com',
    amount: 1200,
    currency: 'JPY',
    idempotency_key: key,
    ...overrides,
  });
  const call = (name: string, args: Record<string, unknown>, meta?: Record<string, unknown>) =>
    mcp.client.callTool({ name, arguments: args, ...(meta ? { _meta: meta } : {}) });
  const count = async (table: 'orders' | 'outbox') =>
    Number(
      (
        await sql<{
          n: string;
        }>`SELECT count(*) AS n FROM ${sql.table(table === 'outbox' ? messagesTable : table)}`.execute(
          example.db,
        )
      ).rows[0]!.n,
    );
  const outboxRows = async (aggregateId?: string) =>
    (
      await sql<{
        message_id: string;
        id: string | number;
        topic: string;
        aggregate_id: string;
        sequence: string | number;
        payload: unknown;
        headers: Record<string, string>;
        created_at: Date;
      }>`SELECT * FROM ${sql.table(messagesTable)} WHERE ${aggregateId === undefined ? sql`true` : sql`aggregate_id = ${aggregateId}`} ORDER BY aggregate_id, sequence`.execute(
        example.db,
      )
    ).rows;

  it('lists the two order tools and the effect status tool', async () => {
    const { tools } = await mcp.client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([
      'create_order',
      'effect_status',
      'refund_order',
    ]);
    expect(tools.find((t) => t.name === 'effect_status')?.annotations?.readOnlyHint).toBe(true);
  });

  it('create_order commits the order and its payment.charge + mail.send messages, traced', async () => {
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const result = await call('create_order', order('req-1'), { traceparent });
    expect(result.isError).toBeFalsy();
    const json = resultJson(result);
    expect(json).toMatchObject({ ok: true, deduped: false, result: { status: 'placed' } });
    expect(resultWords(result)).toMatch(/^Order \d+ was created\./);
    const rows = await outboxRows(`order:${json.result.orderId}`);
    expect(rows.map((r) => r.topic)).toEqual(['payment.charge', 'mail.send']);
    expect(rows.every((r) => r.headers.traceparent === traceparent)).toBe(true);
    expect(rows[0]!.payload).toMatchObject({ orderId: json.result.orderId, amount: 1200 });
  });

  it('a repeated idempotency key answers deduped and writes nothing', async () => {
    const [orders, messages] = [await count('orders'), await count('outbox')];
    const again = await call('create_order', order('req-1', { amount: 999 }));
    expect(resultJson(again)).toMatchObject({ ok: true, deduped: true });
    expect([await count('orders'), await count('outbox')]).toEqual([orders, messages]);
  });

  it('a tool that throws midway leaves no order and no outbox row, and says so', async () => {
    const [orders, messages] = [await count('orders'), await count('outbox')];
    const failed = await call('create_order', order('req-fail', { user_id: 'fail-midway' }));
    expect(failed.isError).toBe(true);
    expect(resultWords(failed)).toMatch(/injected failure/);
    expect([await count('orders'), await count('outbox')]).toEqual([orders, messages]);
  });

  it('invalid input is an error and writes nothing', async () => {
    const before = await count('orders');
    const bad = await call('create_order', order('req-bad', { email: 'not-an-email' }));
    expect(bad.isError).toBe(true);
    expect(await count('orders')).toBe(before);
  });

  it('two concurrent calls with one key create exactly one order', async () => {
    const results = await Promise.all([
      call('create_order', order('req-race', { user_id: 'racer' })),
      call('create_order', order('req-race', { user_id: 'racer' })),
    ]);
    expect(results.map((r) => resultJson(r).deduped).sort()).toEqual([false, true]);
    const { rows } = await sql<{
      n: string;
    }>`SELECT count(*) AS n FROM orders WHERE user_id = 'racer'`.execute(example.db);
    expect(Number(rows[0]!.n)).toBe(1);
  });

  it('refund_order refunds once; a second refund and an unknown order are errors', async () => {
    const created = resultJson(await call('create_order', order('req-2', { amount: 500 })));
    const orderId = created.result.orderId as number;
    const refunded = await call('refund_order', { order_id: orderId, idempotency_key: 'ref-1' });
    expect(resultJson(refunded)).toMatchObject({ ok: true, result: { status: 'refunded' } });
    expect((await outboxRows(`order:${orderId}`)).map((r) => r.topic)).toEqual([
      'payment.charge',
      'mail.send',
      'payment.refund',
      'mail.send',
    ]);
    const twice = await call('refund_order', { order_id: orderId, idempotency_key: 'ref-2' });
    expect(twice.isError).toBe(true);
    expect(resultWords(twice)).toMatch(/already refunded/);
    const unknown = await call('refund_order', { order_id: 999_999, idempotency_key: 'ref-3' });
    expect(resultWords(unknown)).toMatch(/does not exist/);
  });

  it('consumers perform each effect once, even when every message is delivered twice', async () => {
    const messages: OutgoingMessage[] = (await outboxRows()).map((row) => ({
      id: row.message_id,
      rowId: String(row.id),
      topic: row.topic,
      aggregateId: row.aggregate_id,
      sequence: Number(row.sequence),
      payload: row.payload as OutgoingMessage['payload'],
      headers: row.headers,
      createdAt: row.created_at,
      attempts: 1,
    }));
    // An out-of-order refund fails and records nothing, so its later redelivery still works.
    const refund = messages.find((m) => m.topic === 'payment.refund')!;
    await expect(example.consumers.deliver(refund)).rejects.toThrow(/no charge/);

    // In commit order per aggregate, as an ordered dispatcher delivers; then everything again.
    const deliverAll = async () => {
      const outcomes = [];
      for (const message of messages) outcomes.push(await example.consumers.deliver(message));
      return outcomes.map((d) => d.outcome);
    };
    expect(new Set(await deliverAll())).toEqual(new Set(['performed']));
    expect(new Set(await deliverAll())).toEqual(new Set(['duplicate']));

    const count = (topic: string) => messages.filter((m) => m.topic === topic).length;
    expect(example.provider.list('charge')).toHaveLength(count('payment.charge'));
    expect(example.provider.list('refund')).toHaveLength(count('payment.refund'));
    expect(new Set(example.provider.list('charge').map((c) => c.idempotencyKey))).toEqual(
      new Set(messages.filter((m) => m.topic === 'payment.charge').map((m) => m.id)),
    );
    const mails = await example.mailbox.list();
    expect(mails).toHaveLength(count('mail.send'));
    expect(mails.some((m) => /Order \d+ refunded/.test(m.subject))).toBe(true);
  });

  it('the payment provider charges once per key even if the ledger is bypassed', () => {
    const request = { orderId: 1, amount: 10, currency: 'JPY', idempotencyKey: 'k' };
    const a = example.provider.charge(request);
    const b = example.provider.charge(request);
    expect(b).toBe(a);
    expect(example.provider.replays).toBe(1);
  });
}
