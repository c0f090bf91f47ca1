/**
 * Issue 20 in the agent helper, through a real MCP client on Postgres: an `approval` policy holds
 * what it says and the answer tells the model so; `effectStatusTool` reports each state a message
 * goes through — awaiting approval, pending, failed, published, performed, rejected, expired, dead —
 * by message ids or by the call's idempotency key, read-only, bounded, and never another tenant's.
 */
import { z } from 'zod';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  connectInMemory,
  createToolServer,
  effectStatusTool,
  outboxTool,
  pgPoolTransactions,
  type InMemoryToolClient,
  type TransactionRunner,
} from '../../../src/agent/index.js';
import {
  approveMessages,
  createDispatcher,
  fromPg,
  InMemoryPublisher,
  rejectMessages,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { resultJson, resultWords } from './notes-tool.js';

let db: TestDatabase;
let mcp: InMemoryToolClient;
let transactions: TransactionRunner<unknown>;
const statements: string[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  // Records what the tools run, to show the status tool only reads.
  const inner = pgPoolTransactions(db.pool);
  transactions = {
    run: (fn) =>
      inner.run((tx, trx) =>
        fn(
          {
            query: (text, values) => {
              statements.push(text);
              return tx.query(text, values);
            },
          },
          trx,
        ),
      ),
  };
  const refund = outboxTool({
    name: 'refund',
    description: 'Refunds an amount and mails a notice.',
    input: { order: z.string(), amount: z.number(), tenant: z.string().optional() },
    transactions,
    approval: (message, input) => message.topic === 'payment.refund' && input.amount > 10_000,
    handler: async (input, { outbox }) => {
      await outbox.enqueue([
        {
          topic: 'payment.refund',
          aggregateId: `order:${input.order}`,
          payload: { amount: input.amount },
          requiresApproval: false, // the policy wins over the handler
          ...(input.tenant ? { tenantId: input.tenant } : {}),
        },
        {
          topic: 'mail.send',
          aggregateId: `order:${input.order}`,
          payload: { template: 'refunded' },
          ...(input.tenant ? { tenantId: input.tenant } : {}),
        },
      ]);
      return { order: input.order };
    },
  });
  const status = effectStatusTool({ transactions, consumers: ['payments'] });
  const tenantStatus = effectStatusTool({ transactions, name: 'tenant_status', tenantId: 'acme' });
  const metaStatus = effectStatusTool({
    transactions,
    name: 'meta_status',
    tenantId: ({ meta }) => (typeof meta?.tenant === 'string' ? meta.tenant : undefined),
  });
  mcp = await connectInMemory(
    createToolServer({ name: 'shop', tools: [refund, status, tenantStatus, metaStatus] }),
  );
});
afterAll(async () => {
  await mcp?.close();
  await db?.drop();
});
beforeEach(() => {
  statements.length = 0;
});

const call = (name: string, args: Record<string, unknown>, meta?: Record<string, unknown>) =>
  mcp.client.callTool({ name, arguments: args, ...(meta ? { _meta: meta } : {}) });
const statusOf = async (args: Record<string, unknown>, tool = 'effect_status') => {
  const result = await call(tool, args);
  return { json: resultJson(result), words: resultWords(result), isError: result.isError };
};
const drain = () =>
  createDispatcher({ executor: fromPg(db.pool), publisher: new InMemoryPublisher() }).drain();

describe('outboxTool({ approval })', () => {
  it('holds what the policy says, tells the model, and remembers the call', async () => {
    const small = await call('refund', { order: '1', amount: 500, idempotency_key: 'k-small' });
    expect(resultJson(small).queued.every((q: object) => !('awaitingApproval' in q))).toBe(true);
    expect(resultWords(small)).not.toMatch(/approval/);

    const big = await call('refund', { order: '2', amount: 50_000, idempotency_key: 'k-big' });
    const json = resultJson(big);
    expect(json.queued).toEqual([
      { topic: 'payment.refund', messageId: expect.any(String), awaitingApproval: true },
      { topic: 'mail.send', messageId: expect.any(String) },
    ]);
    expect(resultWords(big)).toMatch(
      /1 of them \(payment\.refund\) are awaiting approval by a person: nothing happens until someone approves/,
    );
    const { rows } = await db.pool.query<{
      approval_state: string | null;
      approval_requested_by: string | null;
    }>(`SELECT approval_state, approval_requested_by FROM outbox WHERE message_id = $1`, [
      json.queued[0].messageId,
    ]);
    expect(rows[0]).toEqual({
      approval_state: 'awaiting',
      approval_requested_by: 'tool refund · idempotency key k-big',
    });
    const saved = await db.pool.query<{ ids: string[] }>(
      `SELECT message_ids::text[] AS ids FROM outbox_tool_calls WHERE idempotency_key = 'k-big'`,
    );
    expect(saved.rows[0]!.ids).toEqual(json.queued.map((q: { messageId: string }) => q.messageId));
  });
});

describe('effectStatusTool', () => {
  it('follows a held refund: awaiting approval → pending → published → performed', async () => {
    const big = resultJson(
      await call('refund', { order: '3', amount: 20_000, idempotency_key: 'k-3' }),
    );
    const [refundId, mailId] = big.queued.map((q: { messageId: string }) => q.messageId);

    statements.length = 0;
    let status = await statusOf({ idempotency_key: 'k-3' });
    expect(status.json.effects.map((e: { state: string }) => e.state)).toEqual([
      'awaiting approval',
      'pending',
    ]);
    expect(status.words).toMatch(/payment\.refund for order:3 .* is awaiting approval by a person/);
    expect(status.json.effects[0].expiresAt).toMatch(/^\d{4}-\d\d-\d\dT/);
    // The status tool only read, in a READ ONLY transaction.
    expect(statements[0]).toBe('SET TRANSACTION READ ONLY');
    expect(statements.some((s) => /^\s*(INSERT|UPDATE|DELETE)/i.test(s))).toBe(false);

    await drain(); // the mail is ordered behind the refund: nothing goes
    status = await statusOf({ message_ids: [refundId, mailId] });
    expect(status.json.effects.map((e: { state: string }) => e.state)).toEqual([
      'awaiting approval',
      'pending',
    ]);

    await approveMessages(fromPg(db.pool), [refundId], { by: 'alice', note: 'ok' });
    status = await statusOf({ message_ids: [refundId] });
    expect(status.json.effects[0]).toMatchObject({
      state: 'pending',
      decidedBy: 'alice',
      reason: 'ok',
    });

    await drain();
    status = await statusOf({ message_ids: [refundId, mailId] });
    expect(status.json.effects.map((e: { state: string }) => e.state)).toEqual([
      'published',
      'published',
    ]);
    await db.pool.query(
      `INSERT INTO processed_messages (consumer, message_id, state) VALUES ('payments', $1, 'done')`,
      [refundId],
    );
    status = await statusOf({ message_ids: [refundId] });
    expect(status.json.effects[0]).toMatchObject({
      state: 'performed',
      performedBy: [{ consumer: 'payments', at: expect.any(String) }],
    });
    expect(status.words).toMatch(/was performed by payments at /);
  });

  it('reports rejected (with the reason), expired, failed (redacted) and dead; unknown ids are not found', async () => {
    const rejected = resultJson(
      await call('refund', { order: '4', amount: 90_000, idempotency_key: 'k-4' }),
    ).queued[0].messageId;
    await rejectMessages(fromPg(db.pool), [rejected], { by: 'bob', reason: 'duplicate' });
    const expired = resultJson(
      await call('refund', { order: '5', amount: 90_000, idempotency_key: 'k-5' }),
    ).queued[0].messageId;
    await db.pool.query(
      `UPDATE outbox SET approval_expires_at = now() - interval '1 s' WHERE message_id = $1`,
      [expired],
    );
    const [failed, dead] = resultJson(
      await call('refund', { order: '6', amount: 10, idempotency_key: 'k-6' }),
    ).queued.map((q: { messageId: string }) => q.messageId);
    await db.pool.query(
      `UPDATE outbox SET attempts = 2, last_error = 'HTTP 503 from https://u:s3cret@pay.example',
              available_at = now() + interval '1 minute' WHERE message_id = $1`,
      [failed],
    );
    await db.pool.query(
      `UPDATE outbox SET attempts = 10, last_error = 'gave up', dead_lettered_at = now()
       WHERE message_id = $1`,
      [dead],
    );
    const unknown = '0190aaaa-0000-7000-8000-000000000000';
    const { json, words } = await statusOf({
      message_ids: [rejected, expired, failed, dead, unknown],
    });
    expect(json.effects).toEqual([
      expect.objectContaining({
        state: 'rejected',
        decidedBy: 'bob',
        reason: 'duplicate',
        decidedAt: expect.any(String),
      }),
      expect.objectContaining({ state: 'expired' }),
      expect.objectContaining({ state: 'failed', attempts: 2, nextTryAt: expect.any(String) }),
      expect.objectContaining({ state: 'dead', attempts: 10, lastError: 'gave up' }),
      { messageId: unknown, state: 'not found' },
    ]);
    expect(JSON.stringify(json)).not.toContain('s3cret');
    expect(words).toMatch(/was rejected by bob at .*: duplicate\. It will never happen\./);
  });

  it('never reveals another tenant’s messages', async () => {
    const acme = resultJson(
      await call('refund', { order: '7', amount: 1, tenant: 'acme', idempotency_key: 'k-7' }),
    ).queued[0].messageId;
    const other = resultJson(
      await call('refund', { order: '8', amount: 1, tenant: 'globex', idempotency_key: 'k-8' }),
    ).queued[0].messageId;
    const untenanted = resultJson(
      await call('refund', { order: '9', amount: 1, idempotency_key: 'k-9' }),
    ).queued[0].messageId;
    const states = async (tool: string, meta?: Record<string, unknown>) =>
      resultJson(await call(tool, { message_ids: [acme, other, untenanted] }, meta)).effects.map(
        (e: { state: string }) => e.state,
      );
    expect(await states('tenant_status')).toEqual(['pending', 'not found', 'not found']);
    expect(await states('meta_status', { tenant: 'globex' })).toEqual([
      'not found',
      'pending',
      'not found',
    ]);
    // By idempotency key too: the key of another tenant's call finds nothing.
    expect(
      resultJson(await call('tenant_status', { idempotency_key: 'k-8' })).effects.map(
        (e: { state: string }) => e.state,
      ),
    ).toEqual(['not found', 'not found']);
    const noTenant = await call('meta_status', { message_ids: [acme] });
    expect(noTenant.isError).toBe(true);
    expect(resultWords(noTenant)).toMatch(/carries no tenant/);
  });

  it('is bounded: at most 50 ids per call; an empty question is an error', async () => {
    const many = Array.from(
      { length: 51 },
      (_, i) => `0190aaaa-0000-7000-8000-${String(i).padStart(12, '0')}`,
    );
    expect((await call('effect_status', { message_ids: many })).isError).toBe(true);
    const empty = await call('effect_status', {});
    expect(empty.isError).toBe(true);
    expect(resultWords(empty)).toMatch(/Give the messageId values/);
  });
});
