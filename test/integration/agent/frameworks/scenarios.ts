import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  pgPoolTransactions,
  type EffectStatusToolOptions,
  type OutboxToolDefinition,
} from '../../../../src/ai-sdk/index.js';
import { createTestDatabase, type TestDatabase } from '../../../helpers/database.js';

/**
 * The scenarios every framework adapter passes, each through that framework's own tool loop
 * driven by its own test model, on real Postgres. One tool definition serves all three.
 */

/**
 * One model turn: the tool calls it makes (the turn after the last one answers in text). `id` is
 * the call's id as the model (or the framework) gives it; without one the loop makes a fresh id
 * per run, so two runs never share call ids unless a test means them to.
 */
export type Turn = { name: string; args: Record<string, unknown>; id?: string }[];

/** A call id unique to this run of a loop, for calls without their own `id`. */
export function callIdMaker(): (step: number, index: number, call: Turn[number]) => string {
  const run = Math.random().toString(36).slice(2, 10);
  return (step, index, call) => call.id ?? `call-${run}-${step}-${index}`;
}

/** Runs the framework's loop over `turns`; resolves with every tool output, parsed, in order. */
export type RunLoop = (turns: Turn[]) => Promise<Record<string, unknown>[]>;

/** What a framework test builds its tools from. */
export interface Shop {
  definition: OutboxToolDefinition<
    { order_id: z.ZodNumber; amount: z.ZodNumber; fail: z.ZodOptional<z.ZodBoolean> },
    unknown,
    { chargeId: number }
  >;
  status: EffectStatusToolOptions<unknown>;
}

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });

/**
 * The shared test suite. `makeLoop` gets the ONE definition and the status tool's options and
 * returns the framework's loop.
 */
export function describeFramework(
  framework: string,
  makeLoop: (shop: Shop) => RunLoop,
  options: { nullForOmitted?: boolean } = {},
): void {
  // Strict-mode models (OpenAI) send null for every optional field they leave out.
  const omitted = (fields: string[]) =>
    options.nullForOmitted ? Object.fromEntries(fields.map((f) => [f, null])) : {};
  describe(`${framework}: outbox tools through the framework's own tool loop`, () => {
    let db: TestDatabase;
    let loop: RunLoop;

    beforeAll(async () => {
      trace.setGlobalTracerProvider(provider);
      context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
      db = await createTestDatabase();
      await db.pool.query(
        'CREATE TABLE charges (id serial PRIMARY KEY, order_id int NOT NULL, amount int NOT NULL)',
      );
      const transactions = pgPoolTransactions(db.pool) as Shop['definition']['transactions'];
      const shop: Shop = {
        definition: {
          name: 'charge_order',
          description: 'Charges an order; the card is charged afterwards, exactly once.',
          input: {
            order_id: z.number().int(),
            amount: z.number().int().positive(),
            fail: z.boolean().optional(),
          },
          transactions,
          approval: (message, input) => input.amount > 1000,
          dedupeKey: (input) => `charge:order-${input.order_id}`,
          handler: async (input, { tx, outbox }) => {
            const { rows } = await tx.query<{ id: number }>(
              'INSERT INTO charges (order_id, amount) VALUES ($1, $2) RETURNING id',
              [input.order_id, input.amount],
            );
            await outbox.enqueue({
              topic: 'payment.charge',
              aggregateId: `order:${input.order_id}`,
              payload: { orderId: input.order_id, amount: input.amount },
            });
            if (input.fail) throw new Error('card declined by the handler');
            return { chargeId: rows[0]!.id };
          },
        },
        status: { transactions },
      };
      loop = makeLoop(shop);
    });
    afterAll(() => db.drop());

    const charges = async (orderId: number) =>
      (
        await db.pool.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM charges WHERE order_id = $1',
          [orderId],
        )
      ).rows[0]!.n;
    const messages = async (orderId: number) =>
      (
        await db.pool.query<{
          message_id: string;
          approval_state: string | null;
          available_at: string;
          headers: Record<string, string>;
        }>(
          `SELECT message_id::text, approval_state, available_at::text, headers FROM outbox WHERE aggregate_id = $1`,
          [`order:${orderId}`],
        )
      ).rows;
    const charge = (orderId: number, key: string, extra: Record<string, unknown> = {}) => ({
      name: 'charge_order',
      args: { order_id: orderId, amount: 100, idempotency_key: key, ...extra },
    });

    it('a repeated call (same idempotency key, next turn) writes once', async () => {
      const outputs = await loop([
        [charge(1, 'req-1', omitted(['fail']))],
        [charge(1, 'req-1', omitted(['fail']))],
      ]);
      expect(outputs).toHaveLength(2);
      expect(outputs[0]).toMatchObject({ ok: true, deduped: false, result: { chargeId: 1 } });
      expect(outputs[1]).toMatchObject({ ok: true, deduped: true });
      expect(outputs[0]!.summary).toMatch(/queued side effect \(payment\.charge\)/);
      expect(await charges(1)).toBe(1);
      expect(await messages(1)).toHaveLength(1);
    });

    it('two calls for one effect with different idempotency keys write once (dedupeKey)', async () => {
      const outputs = await loop([[charge(2, 'turn-1')], [charge(2, 'turn-2')]]);
      const [written] = await messages(2);
      expect(outputs[0]).toMatchObject({ ok: true, deduped: false });
      expect(outputs[1]).toMatchObject({
        ok: true,
        deduped: true,
        dedupeKey: 'charge:order-2',
        queued: [{ topic: 'payment.charge', messageId: written!.message_id }],
      });
      expect(outputs[1]!.summary).toMatch(/Already done/);
      // The second call's own row was rolled back with it.
      expect(await charges(2)).toBe(1);
      expect(await messages(2)).toHaveLength(1);
    });

    it('a throwing handler leaves nothing, and the model reads that nothing was saved', async () => {
      const [output] = await loop([[charge(3, 'req-3', { fail: true })]]);
      expect(output).toMatchObject({ ok: false, error: expect.stringMatching(/card declined/) });
      expect(output!.summary).toMatch(/nothing was saved/);
      expect(await charges(3)).toBe(0);
      expect(await messages(3)).toHaveLength(0);
      const { rows } = await db.pool.query(
        `SELECT 1 FROM outbox_tool_calls WHERE idempotency_key = 'req-3'`,
      );
      expect(rows).toHaveLength(0);
    });

    it('a held effect waits for a person, and effect_status says so', async () => {
      const [output] = await loop([[charge(4, 'req-4', { amount: 5000 })]]);
      const [held] = await messages(4);
      expect(output).toMatchObject({
        ok: true,
        queued: [{ topic: 'payment.charge', messageId: held!.message_id, awaitingApproval: true }],
      });
      expect(output!.summary).toMatch(/awaiting approval by a person/);
      // Held: committed, but never due until approved.
      expect(held).toMatchObject({ approval_state: 'awaiting', available_at: 'infinity' });

      const [byId, byKey] = await loop([
        [
          {
            name: 'effect_status',
            args: { message_ids: [held!.message_id], ...omitted(['idempotency_key', 'tool']) },
          },
        ],
        [
          {
            name: 'effect_status',
            args: { idempotency_key: 'req-4', ...omitted(['message_ids', 'tool']) },
          },
        ],
      ]);
      for (const status of [byId, byKey]) {
        expect(status).toMatchObject({
          ok: true,
          effects: [{ messageId: held!.message_id, state: 'awaiting approval' }],
        });
        expect(status!.summary).toMatch(/awaiting approval by a person/);
      }
    });

    it('without idempotency_key the call id is the key: the same call run again writes once', async () => {
      // The "crash": the run committed the tool, then the app died before saving the framework's
      // history; the resumed run replays the same call (same id) from what was saved.
      const call = { name: 'charge_order', args: { order_id: 6, amount: 100 }, id: 'call-six' };
      const withNulls = {
        ...call,
        args: { ...call.args, ...omitted(['fail', 'idempotency_key']) },
      };
      const [first] = await loop([[withNulls]]);
      const [again] = await loop([[withNulls]]);
      expect(first).toMatchObject({ ok: true, deduped: false, result: { chargeId: 6 } });
      // Answered from the first run, with its result; not the dedupeKey's answer (no dedupeKey).
      expect(again).toMatchObject({ ok: true, deduped: true, result: { chargeId: 6 } });
      expect(again!.dedupeKey).toBeUndefined();
      expect(await charges(6)).toBe(1);
      expect(await messages(6)).toHaveLength(1);
      const { rows } = await db.pool.query<{ idempotency_key: string }>(
        `SELECT idempotency_key FROM outbox_tool_calls WHERE tool = 'charge_order' AND idempotency_key = 'call-six'`,
      );
      expect(rows).toHaveLength(1);

      // Another call (its own id) is new work.
      const [other] = await loop([
        [{ ...withNulls, id: 'call-seven', args: { ...withNulls.args, order_id: 7 } }],
      ]);
      expect(other).toMatchObject({ ok: true, deduped: false });
      expect(await charges(7)).toBe(1);
    });

    it("a call's span: execute_tool with the create span under it, and the message carries its trace", async () => {
      exporter.reset();
      await loop([[charge(5, 'req-5')], [charge(5, 'req-5')]]);
      const spans = exporter.getFinishedSpans();
      const tools = spans.filter((s) => s.name === 'execute_tool charge_order');
      expect(tools.map((s) => s.attributes['outbox.tool.deduped'])).toEqual([false, true]);
      const create = spans.find((s) => s.name === 'create payment.charge');
      expect(create?.parentSpanContext?.spanId).toBe(tools[0]!.spanContext().spanId);
      const [message] = await messages(5);
      expect(message!.headers.traceparent).toBe(
        `00-${create!.spanContext().traceId}-${create!.spanContext().spanId}-01`,
      );
    });
  });
}
