import { context, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createOutbox } from '../../../src/writer/create-outbox.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { inTransaction } from '../../helpers/transaction.js';

/**
 * The lanes engine's dispatcher traces as the claim engine's (dispatch-spans.ts): a `dispatch
 * batch` span of its own linked to the messages' traces, and a `send` span per message in the
 * trace of the request that wrote it, a child of its `create` span, failures recorded on it.
 */
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const tracer = provider.getTracer('test-request');
let db: TestDatabase;

beforeAll(async () => {
  trace.setGlobalTracerProvider(provider);
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
  trace.disable();
  context.disable();
});

const outbox = createOutbox({ engine: 'lanes' });
const spansNamed = (name: string) => exporter.getFinishedSpans().filter((s) => s.name === name);
const one = (name: string): ReadableSpan => {
  const found = spansNamed(name);
  expect(found, `spans named "${name}"`).toHaveLength(1);
  return found[0]!;
};

describe('tracing on the lanes engine', () => {
  it('links the batch to the messages and sends each in the trace that wrote it, failures recorded', async () => {
    const request = tracer.startSpan('request');
    await context.with(trace.setSpan(ROOT_CONTEXT, request), () =>
      inTransaction(db.pool, (client) =>
        outbox.enqueue(fromPg(client), [
          { topic: 'mail.send', aggregateId: 'order:1', payload: { n: 1 } },
          { topic: 'payment.refund', aggregateId: 'order:2', payload: { n: 2 } },
        ]),
      ),
    );
    request.end();
    const traceId = request.spanContext().traceId;
    const publisher = new InMemoryPublisher({
      inject: (m) =>
        m.topic === 'payment.refund' ? { status: 'permanent', error: 'refused' } : undefined,
    });
    const drained = await context.with(ROOT_CONTEXT, () =>
      createLaneDispatcher({ executor: fromPg(db.pool), publisher }).drain(),
    );
    expect(drained).toMatchObject({ published: 1, deadLettered: 1 });

    const create = one('create');
    const sent = one('send mail.send');
    const refused = one('send payment.refund');
    const batch = one('dispatch batch');
    // The messages' trace: request → create → send.
    for (const span of [create, sent, refused]) expect(span.spanContext().traceId).toBe(traceId);
    expect(sent.parentSpanContext?.spanId).toBe(create.spanContext().spanId);
    expect(sent.kind).toBe(SpanKind.PRODUCER);
    expect(sent.status.code).toBe(SpanStatusCode.UNSET);
    expect(refused.status.code).toBe(SpanStatusCode.ERROR);
    expect(refused.attributes).toMatchObject({ 'error.type': 'permanent' });
    // The batch: its own trace, linked to the message's, and the send spans linked back to it.
    expect(batch.spanContext().traceId).not.toBe(traceId);
    expect(batch.links.some((l) => l.context.spanId === create.spanContext().spanId)).toBe(true);
    expect(sent.links.some((l) => l.context.spanId === batch.spanContext().spanId)).toBe(true);
    expect(batch.attributes).toMatchObject({
      'messaging.batch.message_count': 2,
      'outbox.batch.published': 1,
      'outbox.batch.dead_lettered': 1,
    });
    // The publisher got the stored trace context in the message's headers.
    const [message] = publisher.published;
    expect(message!.headers.traceparent).toBe(`00-${traceId}-${create.spanContext().spanId}-01`);
  });
});
