import { context, createContextKey, propagation, trace } from '@opentelemetry/api';
import { afterEach, describe, expect, it } from 'vitest';
import { startTracing, type CliTracing } from '../../../src/cli/telemetry.js';

/**
 * `outbox dispatch` registers the SDK without an async context manager unless
 * OUTBOX_OTEL_ASYNC_CONTEXT asks for one (src/cli/telemetry.ts says why: the hooks an
 * AsyncLocalStorage puts on every promise cost ~8 µs of CPU a message). What the dispatcher
 * traces names its parents explicitly; cli-dispatch-tracing.test.ts shows the spans and log
 * lines are the same.
 */
const key = createContextKey('test');
let tracing: CliTracing | undefined;
afterEach(async () => {
  await tracing?.shutdown();
  tracing = undefined;
  trace.disable();
  context.disable();
  propagation.disable();
});

/** What `context.active()` holds after an `await` inside `context.with`. */
const afterAwait = () =>
  context.with(context.active().setValue(key, 'set'), async () => {
    await new Promise((resolve) => setImmediate(resolve));
    return context.active().getValue(key);
  });

describe('outbox dispatch tracing: the context manager', () => {
  it('registers the SDK with no async context manager by default: the context does not follow an await', async () => {
    tracing = await startTracing({ OTEL_TRACES_EXPORTER: 'console' }, '0.0.0');
    expect(tracing).toBeDefined();
    // The SDK is registered (a recording tracer)…
    const span = trace.getTracer('t').startSpan('s');
    expect(span.isRecording()).toBe(true);
    span.end();
    // …and the active context is not carried across an await.
    expect(await afterAwait()).toBeUndefined();
  });

  it('registers the AsyncLocalStorage context manager with OUTBOX_OTEL_ASYNC_CONTEXT=true', async () => {
    tracing = await startTracing(
      { OTEL_TRACES_EXPORTER: 'console', OUTBOX_OTEL_ASYNC_CONTEXT: 'true' },
      '0.0.0',
    );
    expect(await afterAwait()).toBe('set');
  });
});
