import { Writable } from 'node:stream';
import { context, ROOT_CONTEXT, trace, TraceFlags } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger, resolveLogFormat } from '../../../src/cli/log.js';
import { tracingRequest } from '../../../src/cli/telemetry.js';
import { UsageError } from '../../../src/cli/usage-error.js';

function capture() {
  const lines: { stream: string; text: string }[] = [];
  const sink = (stream: string) =>
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push({ stream, text: chunk.toString() });
        done();
      },
    });
  return { lines, streams: { out: sink('out'), err: sink('err') } };
}

const spanContext = {
  traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
  spanId: '00f067aa0ba902b7',
  traceFlags: TraceFlags.SAMPLED,
};

beforeAll(() => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
});
afterAll(() => {
  context.disable();
});

describe('--log-format', () => {
  it('comes from the flag, then --json, then OUTBOX_LOG_FORMAT; text by default', () => {
    expect(resolveLogFormat(undefined, false, undefined)).toBe('text');
    expect(resolveLogFormat(undefined, false, 'JSON')).toBe('json');
    expect(resolveLogFormat(undefined, true, 'text')).toBe('json');
    expect(resolveLogFormat('text', true, 'json')).toBe('text');
    expect(() => resolveLogFormat('yaml', false, undefined)).toThrow(UsageError);
    expect(() => resolveLogFormat(undefined, false, 'logfmt')).toThrow(/OUTBOX_LOG_FORMAT/);
  });

  it('json: one object per line with time, level, msg, fields, and the trace where there is one', () => {
    const { lines, streams } = capture();
    const log = createLogger('json', streams);
    log('info', 'started', { batchSize: 200 });
    context.with(trace.setSpanContext(ROOT_CONTEXT, spanContext), () =>
      log('error', 'settle failed', { error: 'boom' }),
    );
    log('warn', 'dead-lettered', {}, { ...spanContext, spanId: 'b7ad6b7169203331' });

    expect(lines.map((l) => l.stream)).toEqual(['out', 'err', 'err']);
    expect(lines.every((l) => l.text.endsWith('\n') && !l.text.slice(0, -1).includes('\n'))).toBe(
      true,
    );
    const [started, failed, dead] = lines.map((l) => JSON.parse(l.text) as Record<string, unknown>);
    expect(Object.keys(started!)).toEqual(['time', 'level', 'msg', 'fields']);
    expect(started).toMatchObject({ level: 'info', msg: 'started', fields: { batchSize: 200 } });
    expect(new Date(started!.time as string).toISOString()).toBe(started!.time);
    expect(failed).toMatchObject({
      level: 'error',
      msg: 'settle failed',
      fields: { error: 'boom' },
      trace_id: spanContext.traceId,
      span_id: spanContext.spanId,
    });
    expect(dead).toMatchObject({ trace_id: spanContext.traceId, span_id: 'b7ad6b7169203331' });
  });

  it('text: one line for people', () => {
    const { lines, streams } = capture();
    createLogger('text', streams)('info', 'progress', { published: 3, topic: 'mail.send' });
    expect(lines[0]!.text).toMatch(/^\S+Z info {2}progress published=3 topic=mail\.send\n$/);
  });
});

describe('OTEL_* environment', () => {
  it('is off unless an exporter or an OTLP endpoint is named', () => {
    expect(tracingRequest({})).toBeUndefined();
    expect(tracingRequest({ OTEL_SERVICE_NAME: 'x' })).toBeUndefined();
    expect(
      tracingRequest({
        OTEL_TRACES_EXPORTER: 'none',
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318',
      }),
    ).toBeUndefined();
    expect(
      tracingRequest({ OTEL_SDK_DISABLED: 'true', OTEL_TRACES_EXPORTER: 'otlp' }),
    ).toBeUndefined();
  });

  it('reads exporter, protocol and endpoint as the OTLP exporters do', () => {
    expect(tracingRequest({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toEqual({
      exporter: 'otlp',
      protocol: 'http/protobuf',
      endpoint: 'http://collector:4318/v1/traces',
      reason: 'OTEL_EXPORTER_OTLP_ENDPOINT is set',
      asyncContext: false,
    });
    expect(
      tracingRequest({
        OTEL_TRACES_EXPORTER: 'otlp',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/custom',
      }),
    ).toMatchObject({ protocol: 'http/json', endpoint: 'http://c:4318/custom' });
    expect(tracingRequest({ OTEL_TRACES_EXPORTER: 'otlp' })).toMatchObject({
      endpoint: 'http://localhost:4318/v1/traces',
    });
    expect(tracingRequest({ OTEL_TRACES_EXPORTER: 'console' })).toMatchObject({
      exporter: 'console',
    });
    expect(
      tracingRequest({ OTEL_TRACES_EXPORTER: 'console', OUTBOX_OTEL_ASYNC_CONTEXT: 'true' }),
    ).toMatchObject({ asyncContext: true });
  });

  it('refuses what it cannot do, as a usage error', () => {
    expect(() =>
      tracingRequest({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }),
    ).toThrow(/grpc/);
    expect(() => tracingRequest({ OTEL_TRACES_EXPORTER: 'zipkin' })).toThrow(UsageError);
    expect(() =>
      tracingRequest({ OTEL_TRACES_EXPORTER: 'otlp', OUTBOX_OTEL_ASYNC_CONTEXT: 'yes please' }),
    ).toThrow(/OUTBOX_OTEL_ASYNC_CONTEXT=yes please: give true/);
  });
});
