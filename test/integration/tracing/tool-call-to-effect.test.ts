import { randomBytes } from 'node:crypto';
import {
  context,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type SpanContext,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { ATTR_ERROR_TYPE } from '@opentelemetry/semantic-conventions';
import {
  ATTR_MESSAGING_CONSUMER_GROUP_NAME,
  ATTR_MESSAGING_DESTINATION_NAME,
  ATTR_MESSAGING_MESSAGE_ID,
  ATTR_MESSAGING_OPERATION_NAME,
  ATTR_MESSAGING_OPERATION_TYPE,
  ATTR_MESSAGING_SYSTEM,
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_TOOL_NAME,
} from '@opentelemetry/semantic-conventions/incubating';
import { AckPolicy, connect, type NatsConnection } from 'nats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  connectInMemory,
  createToolServer,
  outboxTool,
  pgPoolTransactions,
  type InMemoryToolClient,
} from '../../../src/agent/index.js';
import { bindNatsJetStream } from '../../../src/consumer/bindings/nats.js';
import { createConsumer, createLedger, pgTransactions } from '../../../src/consumer/index.js';
import { createDispatcher, createOutbox, fromPg } from '../../../src/index.js';
import { NatsJetStreamPublisher } from '../../../src/publishers/nats/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { requireService } from '../../helpers/services.js';
import { eventually } from '../../fixtures/consumer/eventually.js';

/**
 * Issue 19: one trace from an agent's tool call to the consumer's effect, recorded by the real
 * SDK (in-memory exporter) while the messages go through Postgres and a real NATS JetStream.
 */
const up = await requireService('NATS JetStream', '127.0.0.1', 4222);

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const contextManager = new AsyncLocalStorageContextManager();
const tracer = provider.getTracer('test-agent');

const suffix = randomBytes(4).toString('hex');
const prefix = `trace${suffix}`;
const stream = `TRACE_${suffix}`;
const topic = `${prefix}.order.created`;

describe.skipIf(!up)('tracing: tool call → enqueue → dispatch to NATS → consumer', () => {
  let db: TestDatabase;
  let nc: NatsConnection;
  let mcp: InMemoryToolClient;
  let publisher: NatsJetStreamPublisher;

  beforeAll(async () => {
    trace.setGlobalTracerProvider(provider);
    context.setGlobalContextManager(contextManager.enable());
    db = await createTestDatabase();
    await db.pool.query('CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)');
    await db.pool.query('CREATE TABLE charges (order_id int PRIMARY KEY)');
    nc = await connect({ servers: '127.0.0.1:4222' });
    const jsm = await nc.jetstreamManager();
    await jsm.streams.add({ name: stream, subjects: [`${prefix}.>`] });
    await jsm.consumers.add(stream, {
      durable_name: 'billing',
      ack_policy: AckPolicy.Explicit,
      ack_wait: 30_000_000_000,
    });
    const createOrder = outboxTool({
      name: 'create_order',
      description: 'Creates an order; the card is charged afterwards.',
      input: { item: z.string() },
      transactions: pgPoolTransactions(db.pool),
      outbox: createOutbox(),
      handler: async (input, { tx, outbox }) => {
        const { rows } = await tx.query<{ id: number }>(
          'INSERT INTO orders (item) VALUES ($1) RETURNING id',
          [input.item],
        );
        const id = rows[0]!.id;
        await outbox.enqueue({ topic, aggregateId: `order:${id}`, payload: { orderId: id } });
        return { orderId: id };
      },
    });
    mcp = await connectInMemory(createToolServer({ name: 'shop', tools: [createOrder] }));
    publisher = new NatsJetStreamPublisher({
      connection: 'nats://127.0.0.1:4222',
      stream: { name: stream },
    });
  });

  afterAll(async () => {
    await mcp?.close();
    await publisher?.close();
    await (await nc?.jetstreamManager())?.streams.delete(stream).catch(() => undefined);
    await nc?.close();
    await db?.drop();
    trace.disable();
    context.disable();
  });

  const spansNamed = (name: string) => exporter.getFinishedSpans().filter((s) => s.name === name);
  const one = (name: string): ReadableSpan => {
    const found = spansNamed(name);
    expect(found, `spans named "${name}"`).toHaveLength(1);
    return found[0]!;
  };
  const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId;
  const sameContext = (a: SpanContext, b: SpanContext) =>
    a.traceId === b.traceId && a.spanId === b.spanId;

  it('follows one trace id across the tool call, the enqueue, the dispatch and the consumer', async () => {
    // The agent's turn: an MCP client propagates W3C context in the request's _meta.
    const turn = tracer.startSpan('agent turn');
    const { traceId, spanId } = turn.spanContext();
    const called = await context.with(trace.setSpan(ROOT_CONTEXT, turn), () =>
      mcp.client.callTool({
        name: 'create_order',
        arguments: { item: 'book', idempotency_key: `req-${suffix}` },
        _meta: { traceparent: `00-${traceId}-${spanId}-01` },
      }),
    );
    turn.end();
    expect(called.isError).toBeFalsy();

    // Dispatch outside any span: the batch span starts its own trace and links to the messages'.
    const drained = await context.with(ROOT_CONTEXT, () =>
      createDispatcher({ executor: fromPg(db.pool), publisher }).drain(),
    );
    expect(drained).toMatchObject({ published: 1, failed: false });

    const ledger = createLedger({ runner: pgTransactions(db.pool) });
    const consumer = createConsumer({
      name: 'billing',
      mode: 'transactional',
      ledger,
      handler: async (message, { tx }) => {
        // The handler runs in the process span: its own spans are children of it.
        await tracer.startActiveSpan('charge card', async (span) => {
          await tx.query('INSERT INTO charges (order_id) VALUES ($1)', [
            (message.payload as { orderId: number }).orderId,
          ]);
          span.end();
        });
      },
    });
    const binding = await bindNatsJetStream(
      await nc.jetstream().consumers.get(stream, 'billing'),
      consumer,
    );
    await eventually(async () => spansNamed(`process ${topic}`).length === 1);
    await binding.stop();

    const tool = one('execute_tool create_order');
    const create = one(`create ${topic}`);
    const send = one(`send ${topic}`);
    const process = one(`process ${topic}`);
    const charge = one('charge card');
    const batch = one('dispatch batch');

    // ONE trace: from the agent's turn to the consumer's effect.
    for (const span of [tool, create, send, process, charge])
      expect(span.spanContext().traceId, span.name).toBe(traceId);
    // Parents: turn → tool → create → { send, process }; process → the handler's span.
    expect(parentOf(tool)).toBe(spanId);
    expect(parentOf(create)).toBe(tool.spanContext().spanId);
    expect(parentOf(send)).toBe(create.spanContext().spanId);
    expect(parentOf(process)).toBe(create.spanContext().spanId);
    expect(parentOf(charge)).toBe(process.spanContext().spanId);
    // The batch is the dispatcher's own trace, linked both ways with the message's.
    expect(batch.spanContext().traceId).not.toBe(traceId);
    expect(batch.parentSpanContext).toBeUndefined();
    expect(batch.links.some((l) => sameContext(l.context, create.spanContext()))).toBe(true);
    expect(send.links.some((l) => sameContext(l.context, batch.spanContext()))).toBe(true);
    // HrTime is [seconds, nanoseconds]: compared as arrays, JavaScript compares their strings, and
    // 99999999 ns sorts after 100000000 ns (this assertion failed now and then that way).
    const ns = ([seconds, nanos]: readonly [number, number]) =>
      BigInt(seconds) * 1_000_000_000n + BigInt(nanos);
    expect(ns(send.startTime)).toBeGreaterThanOrEqual(ns(batch.startTime));
    expect(ns(send.endTime)).toBeLessThanOrEqual(ns(batch.endTime));

    expect(tool.kind).toBe(SpanKind.INTERNAL);
    expect(create.kind).toBe(SpanKind.PRODUCER);
    expect(send.kind).toBe(SpanKind.PRODUCER);
    expect(process.kind).toBe(SpanKind.CONSUMER);
    expect(batch.kind).toBe(SpanKind.INTERNAL);

    // The stored traceparent is the create span's; NATS carries it in its own headers too.
    const { rows } = await db.pool.query<{ message_id: string; traceparent: string }>(
      `SELECT message_id, headers->>'traceparent' AS traceparent FROM outbox_messages`,
    );
    expect(rows).toEqual([
      {
        message_id: rows[0]!.message_id,
        traceparent: `00-${traceId}-${create.spanContext().spanId}-01`,
      },
    ]);
    const messageId = rows[0]!.message_id;
    const stored = await (await nc.jetstreamManager()).streams.getMessage(stream, { seq: 1 });
    expect(stored.header.get('traceparent')).toBe(rows[0]!.traceparent);

    // Semantic-convention attribute names, from the conventions package itself.
    expect(tool.attributes).toMatchObject({
      [ATTR_GEN_AI_OPERATION_NAME]: 'execute_tool',
      [ATTR_GEN_AI_TOOL_NAME]: 'create_order',
      'outbox.tool.deduped': false,
    });
    expect(create.attributes).toMatchObject({
      [ATTR_MESSAGING_SYSTEM]: 'agent_outbox',
      [ATTR_MESSAGING_OPERATION_NAME]: 'create',
      [ATTR_MESSAGING_OPERATION_TYPE]: 'create',
      [ATTR_MESSAGING_DESTINATION_NAME]: topic,
      [ATTR_MESSAGING_MESSAGE_ID]: messageId,
    });
    expect(send.attributes).toMatchObject({
      [ATTR_MESSAGING_SYSTEM]: 'nats',
      [ATTR_MESSAGING_OPERATION_NAME]: 'send',
      [ATTR_MESSAGING_OPERATION_TYPE]: 'send',
      [ATTR_MESSAGING_DESTINATION_NAME]: topic,
      [ATTR_MESSAGING_MESSAGE_ID]: messageId,
      'outbox.attempt': 1,
    });
    expect(send.attributes).not.toHaveProperty(ATTR_ERROR_TYPE);
    expect(send.status.code).toBe(SpanStatusCode.UNSET);
    expect(process.attributes).toMatchObject({
      [ATTR_MESSAGING_SYSTEM]: 'nats',
      [ATTR_MESSAGING_OPERATION_NAME]: 'process',
      [ATTR_MESSAGING_OPERATION_TYPE]: 'process',
      [ATTR_MESSAGING_DESTINATION_NAME]: topic,
      [ATTR_MESSAGING_MESSAGE_ID]: messageId,
      [ATTR_MESSAGING_CONSUMER_GROUP_NAME]: 'billing',
      'outbox.ledger.mode': 'transactional',
      'outbox.delivery.action': 'ack',
      'outbox.delivery.reason': 'processed',
      'outbox.delivery.attempt': 1,
    });
    expect(batch.attributes).toMatchObject({
      'messaging.batch.message_count': 1,
      'outbox.batch.published': 1,
    });

    // A redelivery is skipped by the ledger, and says so on its own process span.
    const envelope = JSON.parse(new TextDecoder().decode(stored.data)) as unknown;
    expect(await consumer.handle(envelope as never)).toMatchObject({ reason: 'duplicate' });
    const duplicate = spansNamed(`process ${topic}`).find(
      (s) => s.attributes['outbox.delivery.reason'] === 'duplicate',
    )!;
    expect(duplicate.attributes['outbox.delivery.action']).toBe('ack');
    expect(parentOf(duplicate)).toBe(create.spanContext().spanId);
  });

  it('records a failing publish on its send span', async () => {
    exporter.reset();
    // A subject the publisher's stream does not capture: NATS refuses it for good (permanent).
    const stray = `stray${suffix}.refund`;
    const root = tracer.startSpan('request');
    await context.with(trace.setSpan(ROOT_CONTEXT, root), async () => {
      const client = await db.pool.connect();
      try {
        await client.query('BEGIN');
        await createOutbox().enqueue(fromPg(client), {
          topic: stray,
          aggregateId: 'refund:1',
          payload: {},
        });
        await client.query('COMMIT');
      } finally {
        client.release();
      }
    });
    root.end();
    const drained = await context.with(ROOT_CONTEXT, () =>
      createDispatcher({ executor: fromPg(db.pool), publisher }).drain(),
    );
    expect(drained).toMatchObject({ deadLettered: 1, failed: true });

    const send = one(`send ${stray}`);
    expect(send.spanContext().traceId).toBe(root.spanContext().traceId);
    expect(send.status.code).toBe(SpanStatusCode.ERROR);
    expect(send.status.message).toMatch(/does not capture subject/);
    expect(send.attributes).toMatchObject({
      [ATTR_ERROR_TYPE]: 'permanent',
    });
    expect(send.events.map((e) => e.name)).toContain('exception');
    expect(one('dispatch batch').attributes).toMatchObject({ 'outbox.batch.dead_lettered': 1 });
  });
});
