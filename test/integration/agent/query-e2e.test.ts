/**
 * End to end through the Agent SDK's real `query()` loop: the bundled Claude Code CLI runs as a
 * child process, talks to the scripted fake Messages API on 127.0.0.1, and calls the orders
 * tools over the SDK's in-process MCP server; the tools write to real Postgres, the dispatcher
 * publishes, the consumers perform the effects. Asserts rows and effects, never the result
 * subtype alone (a denied tool also ends in 'success').
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  ORDER_TOOLS,
  runOrdersAgent,
  scriptedOrdersModel,
} from '../../../examples/demo/agent-session.js';
import {
  startFakeMessagesApi,
  type FakeMessagesApi,
} from '../../../examples/demo/fake-messages-api.js';
import { createDemoPipeline, type DemoPipeline } from '../../../examples/demo/pipeline.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';

const TRACEPARENT = /^00-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/;

describe('orders tools through query() with a fake Messages API, on Postgres', () => {
  let database: TestDatabase;
  let scratch: string;
  let api: FakeMessagesApi;
  let pipeline: DemoPipeline;

  beforeEach(async () => {
    database = await createTestDatabase();
    scratch = await mkdtemp(join(tmpdir(), 'ao-query-e2e-'));
    api = await startFakeMessagesApi(scriptedOrdersModel());
    let carolFailed = false;
    pipeline = await createDemoPipeline({
      database: { pool: database.pool },
      mailboxDir: join(scratch, 'mailbox'),
      injectToolFailure: (tool, input) => {
        if (tool !== 'create_order' || (input as { user_id?: string }).user_id !== 'u-carol')
          return false;
        if (carolFailed) return false;
        carolFailed = true;
        return true;
      },
    });
    pipeline.start();
  });

  afterEach(async () => {
    await pipeline.stop();
    await api.close();
    await database.drop();
    await rm(scratch, { recursive: true, force: true });
  });

  const run = (allowedTools?: readonly string[]) =>
    runOrdersAgent({
      example: pipeline.example,
      requestId: 'req-e2e-1',
      allowedTools,
      cwd: scratch,
      // HOME in a temp dir: no user settings read, nothing written to the real home.
      env: {
        PATH: process.env.PATH,
        HOME: scratch,
        ANTHROPIC_BASE_URL: api.url,
        ANTHROPIC_API_KEY: 'fake-key',
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      },
    });

  it(
    'writes orders and traced outbox messages in the tools, and every effect happens once',
    { timeout: 120_000 },
    async () => {
      const agent = await run();
      await pipeline.settle();

      // The loop really went through the fake model: one request per turn, tool results fed back.
      expect(
        api.requests.filter((r) => r.tools?.some((t) => t.name === ORDER_TOOLS.create)).length,
      ).toBeGreaterThanOrEqual(7);
      expect(agent.tally).toEqual({ calls: 6, committed: 4, deduped: 1, failed: 1 });

      const orders = (
        await database.pool.query<{
          id: number;
          user_id: string;
          status: string;
          idempotency_key: string;
        }>('SELECT id, user_id, status, idempotency_key FROM orders ORDER BY id')
      ).rows;
      // alice once (the repeat was deduped), bob refunded, carol once (the failed try left nothing).
      expect(orders.map((o) => [o.user_id, o.status])).toEqual([
        ['u-alice', 'placed'],
        ['u-bob', 'refunded'],
        ['u-carol', 'placed'],
      ]);
      // The keys are the harness's (hook), not the model's 'k-1', 'k-2', ...
      for (const o of orders)
        expect(o.idempotency_key).toMatch(/^req-e2e-1:create_order:[0-9a-f]{16}$/);
      const keys = (
        await database.pool.query<{ tool: string; idempotency_key: string }>(
          'SELECT tool, idempotency_key FROM outbox_tool_calls ORDER BY created_at',
        )
      ).rows;
      expect(keys.map((k) => k.tool).sort()).toEqual([
        'create_order',
        'create_order',
        'create_order',
        'refund_order',
      ]);

      const messages = (
        await database.pool.query<{
          id: string;
          topic: string;
          aggregate_id: string;
          sequence: string;
          traceparent: string | null;
          dispatched: boolean;
        }>(
          `SELECT message_id::text AS id, topic, aggregate_id, sequence::text,
                headers->>'traceparent' AS traceparent, dispatched_at IS NOT NULL AS dispatched
           FROM outbox_messages ORDER BY aggregate_id, sequence`,
        )
      ).rows;
      const [alice, bob, carol] = orders.map((o) => `order:${o.id}`);
      expect(messages.map((m) => [m.aggregate_id, m.sequence, m.topic])).toEqual([
        [alice, '1', 'payment.charge'],
        [alice, '2', 'mail.send'],
        [bob, '1', 'payment.charge'],
        [bob, '2', 'mail.send'],
        [bob, '3', 'payment.refund'],
        [bob, '4', 'mail.send'],
        [carol, '1', 'payment.charge'],
        [carol, '2', 'mail.send'],
      ]);
      expect(messages.every((m) => m.dispatched)).toBe(true);
      // Every message carries the trace of the tool call that wrote it: both messages of one call
      // share a trace id, different calls do not.
      const traceOf = (m: (typeof messages)[number]) => TRACEPARENT.exec(m.traceparent ?? '')?.[1];
      expect(messages.every((m) => traceOf(m) !== undefined)).toBe(true);
      const traces = [0, 2, 4, 6].map((i) => traceOf(messages[i]!));
      [0, 2, 4, 6].forEach((i) => expect(traceOf(messages[i + 1]!)).toBe(traceOf(messages[i]!)));
      expect(new Set(traces).size).toBe(4);

      // Effects, as the fake provider and the mailbox recorded them: once each, keyed by message id.
      const byTopic = (topic: string) => messages.filter((m) => m.topic === topic).map((m) => m.id);
      const provider = pipeline.example.provider;
      expect(
        provider
          .list('charge')
          .map((c) => c.idempotencyKey)
          .sort(),
      ).toEqual(byTopic('payment.charge').sort());
      expect(provider.list('refund').map((r) => [r.orderId, r.amount, r.currency])).toEqual([
        [orders[1]!.id, 25, 'USD'],
      ]);
      expect(provider.replays).toBe(0);
      const mails = await pipeline.example.mailbox.list();
      expect(mails.map((m) => m.key).sort()).toEqual(byTopic('mail.send').sort());
      expect(mails.map((m) => m.subject).sort()).toEqual(
        [
          `Order ${orders[0]!.id} received`,
          `Order ${orders[1]!.id} received`,
          `Order ${orders[1]!.id} refunded`,
          `Order ${orders[2]!.id} received`,
        ].sort(),
      );

      // A second delivery of a consumed message is recognised by the ledger, not performed again.
      const charge = pipeline.publisher.published.find((m) => m.topic === 'payment.charge')!;
      expect(await pipeline.redeliver(charge)).toMatchObject({
        action: 'ack',
        reason: 'duplicate',
      });
      expect(provider.list('charge')).toHaveLength(3);
    },
  );

  it(
    'a tool left out of allowedTools writes nothing, although the run still ends in success',
    { timeout: 120_000 },
    async () => {
      const agent = await run([ORDER_TOOLS.create]);
      await pipeline.settle();

      expect(agent.subtype).toBe('success');
      const statuses = (
        await database.pool.query<{ user_id: string; status: string }>(
          'SELECT user_id, status FROM orders ORDER BY id',
        )
      ).rows;
      expect(statuses.find((o) => o.user_id === 'u-bob')?.status).toBe('placed');
      const refunds = await database.pool.query(
        "SELECT 1 FROM outbox_messages WHERE topic = 'payment.refund'",
      );
      expect(refunds.rows).toHaveLength(0);
      expect(pipeline.example.provider.list('refund')).toHaveLength(0);
    },
  );
});
