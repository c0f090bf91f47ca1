import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOutbox, type SqlExecutor } from '../../../src/index.js';

// Captures the batch the writer sends instead of running it, and answers like the database would.
// The writers name their engine: one without would first read the schema's record (migration 036).
function capturingExecutor(): {
  executor: SqlExecutor;
  batches: { h: Record<string, string> }[][];
} {
  const batches: { h: Record<string, string>; a: string }[][] = [];
  const executor: SqlExecutor = {
    query: async <Row>(_text: string, values?: readonly unknown[]) => {
      const batch = JSON.parse(String(values?.[0])) as {
        h: Record<string, string>;
        a: string;
        t: string;
      }[];
      batches.push(batch);
      const rows = batch.map((m, i) => ({
        id: String(i + 1),
        messageId: `00000000-0000-4000-8000-00000000000${i}`,
        sequence: '1',
        topic: m.t,
        aggregateId: m.a,
      }));
      return { rows: rows as Row[] };
    },
  };
  return { executor, batches };
}

const manager = new AsyncLocalStorageContextManager();
const tracer = new BasicTracerProvider().getTracer('test');
beforeAll(() => {
  context.setGlobalContextManager(manager.enable());
});
afterAll(() => {
  context.disable();
});

describe('writer trace context', () => {
  it('writes the active span as a W3C traceparent header, even with no global propagator', async () => {
    const { executor, batches } = capturingExecutor();
    const outbox = createOutbox({ engine: 'claims' });
    const span = tracer.startSpan('tool call');
    await context.with(trace.setSpan(context.active(), span), () =>
      outbox.enqueue(executor, { topic: 't', aggregateId: 'a', payload: {} }),
    );
    span.end();
    const { traceId, spanId } = span.spanContext();
    expect(batches[0]![0]!.h).toMatchObject({
      traceparent: `00-${traceId}-${spanId}-01`,
      schema_version: '1',
    });
  });

  it('adds no traceparent without an active span, and an explicit header wins over the span', async () => {
    const { executor, batches } = capturingExecutor();
    const outbox = createOutbox({ engine: 'claims' });
    await outbox.enqueue(executor, { topic: 't', aggregateId: 'a', payload: {} });
    expect(batches[0]![0]!.h).not.toHaveProperty('traceparent');

    const explicit = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const span = tracer.startSpan('other');
    await context.with(trace.setSpan(context.active(), span), () =>
      outbox.enqueue(executor, {
        topic: 't',
        aggregateId: 'a',
        payload: {},
        headers: { traceparent: explicit },
      }),
    );
    span.end();
    expect(batches[1]![0]!.h.traceparent).toBe(explicit);
  });

  it('captureTraceContext: false leaves trace headers out', async () => {
    const { executor, batches } = capturingExecutor();
    const span = tracer.startSpan('x');
    await context.with(trace.setSpan(context.active(), span), () =>
      createOutbox({ captureTraceContext: false, engine: 'claims' }).enqueue(executor, {
        topic: 't',
        aggregateId: 'a',
        payload: {},
      }),
    );
    span.end();
    expect(batches[0]![0]!.h).not.toHaveProperty('traceparent');
  });
});
