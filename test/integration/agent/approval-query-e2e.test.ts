/**
 * Issue 20 end to end through the Agent SDK's real `query()` loop (the bundled Claude Code CLI
 * against the scripted fake Messages API, as query-e2e.test.ts), on Postgres:
 *
 * 1. the model asks for a large refund; `refund_order`'s approval policy commits it held; the
 *    model calls the status tool and reads "awaiting approval"; the test approves through the
 *    CLI; the dispatcher publishes, the consumer performs; in a later turn the status tool reads
 *    "performed";
 * 2. the library's `idempotencyKeyHook`: the same request retried (same request id) is answered
 *    `deduped`, a new request is not.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ORDER_TOOLS, runOrdersAgent } from '../../../examples/demo/agent-session.js';
import {
  startFakeMessagesApi,
  toolResults,
  type FakeMessagesApi,
  type MessagesRequest,
  type Script,
} from '../../../examples/demo/fake-messages-api.js';
import { createDemoPipeline, type DemoPipeline } from '../../../examples/demo/pipeline.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { runCli } from '../../helpers/run-cli.js';

const REFUND_PROMPT =
  'Create an order for u-erin (erin@example.com): 50000 JPY. Then refund it in full ' +
  '(reason: arrived damaged), and check whether the refund went through.';
const CHECK_PROMPT = 'Check again whether the refund you asked for earlier went through.';
const ORDER_PROMPT = 'Create an order for u-zoe (zoe@example.com): 700 JPY.';

const firstPrompt = (request: MessagesRequest): string => {
  const first = request.messages[0]?.content;
  if (typeof first === 'string') return first;
  return (first ?? []).map((b) => b.text ?? '').join(' ');
};
const jsonOf = (text: string | undefined) => JSON.parse(text ?? '{}') as Record<string, any>;

/**
 * The scripted model of both stories. It remembers the refund's message id between the two
 * `query()` runs, as the application's conversation would.
 */
function scriptedModel(): Script & { refundMessageId?: string } {
  const state: { refundMessageId?: string } = {};
  const script = ((request) => {
    const offered = new Set((request.tools ?? []).map((t) => t.name));
    if (!offered.has(ORDER_TOOLS.create)) return { text: 'OK.' };
    const prompt = firstPrompt(request);
    const results = toolResults(request);
    if (prompt.includes('u-zoe')) {
      if (results.length === 0)
        return {
          toolUses: [
            {
              name: ORDER_TOOLS.create,
              input: {
                user_id: 'u-zoe',
                email: 'zoe@example.com',
                amount: 700,
                currency: 'JPY',
                // A model invents a key per attempt; the hook replaces it.
                idempotency_key: `model-${Math.random()}`,
              },
            },
          ],
        };
      return { text: 'Done.' };
    }
    if (prompt.includes('Check again')) {
      if (results.length === 0)
        return {
          toolUses: [{ name: ORDER_TOOLS.status, input: { message_ids: [state.refundMessageId] } }],
        };
      return { text: 'The refund was performed.' };
    }
    switch (results.length) {
      case 0:
        return {
          toolUses: [
            {
              name: ORDER_TOOLS.create,
              input: {
                user_id: 'u-erin',
                email: 'erin@example.com',
                amount: 50_000,
                currency: 'JPY',
                idempotency_key: 'k-1',
              },
            },
          ],
        };
      case 1: {
        const orderId = jsonOf(results[0]?.parts[0]).result?.orderId as number;
        return {
          toolUses: [
            {
              name: ORDER_TOOLS.refund,
              input: { order_id: orderId, reason: 'arrived damaged', idempotency_key: 'k-2' },
            },
          ],
        };
      }
      case 2: {
        const queued = jsonOf(results[1]?.parts[0]).queued as {
          topic: string;
          messageId: string;
          awaitingApproval?: boolean;
        }[];
        state.refundMessageId = queued.find((q) => q.topic === 'payment.refund')?.messageId;
        return {
          text: 'The refund needs approval; checking its status.',
          toolUses: [{ name: ORDER_TOOLS.status, input: { message_ids: [state.refundMessageId] } }],
        };
      }
      default:
        return { text: 'The refund waits for a person to approve it.' };
    }
  }) as Script & { refundMessageId?: string };
  return Object.defineProperty(script, 'refundMessageId', { get: () => state.refundMessageId });
}

/** The tool results the model saw in the run's last request, by tool name. */
function lastResults(api: FakeMessagesApi): { json: Record<string, any>; words: string }[] {
  const last = api.requests
    .filter((r) => r.tools?.some((t) => t.name === ORDER_TOOLS.create))
    .at(-1)!;
  return toolResults(last).map((r) => ({ json: jsonOf(r.parts[0]), words: r.parts[1] ?? '' }));
}

describe('held refund and effect status through query() with a fake Messages API, on Postgres', () => {
  let database: TestDatabase;
  let scratch: string;
  let api: FakeMessagesApi;
  let pipeline: DemoPipeline;
  let model: ReturnType<typeof scriptedModel>;

  beforeEach(async () => {
    database = await createTestDatabase();
    scratch = await mkdtemp(join(tmpdir(), 'ao-approval-e2e-'));
    model = scriptedModel();
    api = await startFakeMessagesApi(model);
    pipeline = await createDemoPipeline({
      database: { pool: database.pool },
      mailboxDir: join(scratch, 'mailbox'),
      injectPublishFailure: () => undefined,
    });
    pipeline.start();
  });

  afterEach(async () => {
    await pipeline.stop();
    await api.close();
    await database.drop();
    await rm(scratch, { recursive: true, force: true });
  });

  const run = (requestId: string, prompt: string) =>
    runOrdersAgent({
      example: pipeline.example,
      requestId,
      prompt,
      cwd: scratch,
      env: {
        PATH: process.env.PATH,
        HOME: scratch,
        ANTHROPIC_BASE_URL: api.url,
        ANTHROPIC_API_KEY: 'fake-key',
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      },
    });

  it(
    'the model reads "awaiting approval", the CLI approves, the consumer performs, the model reads "performed"',
    { timeout: 180_000 },
    async () => {
      const first = await run('req-refund-1', REFUND_PROMPT);
      expect(first.tally).toEqual({ calls: 3, committed: 3, deduped: 0, failed: 0 });
      const [created, refunded, status] = lastResults(api);
      expect(created!.json.result).toMatchObject({ status: 'placed' });
      expect(refunded!.json.queued).toEqual([
        { topic: 'payment.refund', messageId: model.refundMessageId, awaitingApproval: true },
        { topic: 'mail.send', messageId: expect.any(String) },
      ]);
      expect(refunded!.words).toMatch(/awaiting approval by a person/);
      expect(status!.json.effects).toEqual([
        expect.objectContaining({
          messageId: model.refundMessageId,
          topic: 'payment.refund',
          state: 'awaiting approval',
        }),
      ]);
      expect(status!.words).toMatch(/is awaiting approval by a person/);

      // The order's charge and mail go; the refund and its notice wait.
      await pipeline.settle();
      expect(pipeline.example.provider.list('charge')).toHaveLength(1);
      expect(pipeline.example.provider.list('refund')).toHaveLength(0);
      expect((await pipeline.example.mailbox.list()).map((m) => m.subject)).toEqual([
        expect.stringMatching(/received$/),
      ]);

      const listed = await runCli(['approvals', '--json', '--database-url', database.url]);
      const waiting = JSON.parse(listed.stdout) as {
        id: string;
        messageId: string;
        requestedBy: string;
      }[];
      expect(waiting.map((w) => w.messageId)).toEqual([model.refundMessageId]);
      expect(waiting[0]!.requestedBy).toMatch(
        /^tool refund_order · idempotency key req-refund-1:refund_order:[0-9a-f]{16}$/,
      );
      const approved = await runCli([
        'approve',
        waiting[0]!.id,
        '--by',
        'e2e-operator',
        '--note',
        'damage confirmed by photo',
        '--database-url',
        database.url,
      ]);
      expect(approved.code, approved.stderr).toBe(0);

      await pipeline.settle();
      const refunds = pipeline.example.provider.list('refund');
      expect(refunds.map((r) => [r.amount, r.currency, r.idempotencyKey])).toEqual([
        [50_000, 'JPY', model.refundMessageId],
      ]);
      expect((await pipeline.example.mailbox.list()).map((m) => m.subject).sort()).toEqual(
        [expect.stringMatching(/received$/), expect.stringMatching(/refunded$/)].sort(),
      );

      const second = await run('req-refund-2', CHECK_PROMPT);
      expect(second.tally.calls).toBe(1);
      const [checked] = lastResults(api);
      expect(checked!.json.effects).toEqual([
        expect.objectContaining({
          messageId: model.refundMessageId,
          state: 'performed',
          performedBy: [{ consumer: 'payments', at: expect.any(String) }],
          decidedBy: 'e2e-operator',
          reason: 'damage confirmed by photo',
        }),
      ]);
      expect(checked!.words).toMatch(/was performed by payments at/);
    },
  );

  it(
    'idempotencyKeyHook: the same request retried is answered deduped; a new request is not',
    { timeout: 180_000 },
    async () => {
      const first = await run('req-zoe-1', ORDER_PROMPT);
      const retried = await run('req-zoe-1', ORDER_PROMPT);
      const next = await run('req-zoe-2', ORDER_PROMPT);
      expect(first.tally).toMatchObject({ calls: 1, committed: 1, deduped: 0 });
      expect(retried.tally).toMatchObject({ calls: 1, committed: 0, deduped: 1 });
      expect(next.tally).toMatchObject({ calls: 1, committed: 1, deduped: 0 });
      const { rows } = await database.pool.query<{ idempotency_key: string }>(
        `SELECT idempotency_key FROM orders WHERE user_id = 'u-zoe' ORDER BY id`,
      );
      expect(rows.map((r) => r.idempotency_key)).toEqual([
        expect.stringMatching(/^req-zoe-1:create_order:[0-9a-f]{16}$/),
        expect.stringMatching(/^req-zoe-2:create_order:[0-9a-f]{16}$/),
      ]);
    },
  );
});
