import { mkdtempSync, readFileSync, existsSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createOutbox, fromPg } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { resetOutbox } from '../../helpers/outbox-fixtures.js';
import { runCli } from '../../helpers/run-cli.js';

/**
 * Issue 19: `outbox dispatch` as a traced service. The standard OTEL_* variables make it export
 * over OTLP/HTTP (JSON here) to a receiver in this test; without them it loads no SDK at all.
 */

interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/** A plain HTTP server that records every request and answers 200 (or `status`). */
async function recordingServer(status: (body: string) => number = () => 200) {
  const requests: Received[] = [];
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      requests.push({ path: request.url ?? '', headers: request.headers, body });
      response.writeHead(status(body), { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

type OtlpValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean };
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: { key: string; value: OtlpValue }[];
  links?: { traceId: string; spanId: string }[];
  status?: { code?: number; message?: string };
}
interface OtlpExport {
  resourceSpans: {
    resource: { attributes: { key: string; value: OtlpValue }[] };
    scopeSpans: { scope: { name: string }; spans: OtlpSpan[] }[];
  }[];
}

const attributes = (list: { key: string; value: OtlpValue }[]) =>
  Object.fromEntries(
    list.map(({ key, value }) => [key, value.stringValue ?? value.intValue ?? value.boolValue]),
  );

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const PRODUCER_SPAN = '00f067aa0ba902b7';
const OTHER_TRACE = '0af7651916cd43dd8448eb211c80319c';
const recorder = fileURLToPath(
  new URL('../../fixtures/tracing/record-imports.mjs', import.meta.url),
);
/** Every OTEL_* variable of this process blanked, so the child sees only what a test sets. */
const noOtel = Object.fromEntries(
  Object.keys(process.env)
    .filter((key) => key.startsWith('OTEL_'))
    .map((key) => [key, '']),
);

let db: TestDatabase;
let webhook: Awaited<ReturnType<typeof recordingServer>>;
let collector: Awaited<ReturnType<typeof recordingServer>>;
const scratch = mkdtempSync(join(tmpdir(), 'outbox-tracing-'));

beforeAll(async () => {
  db = await createTestDatabase();
  // The webhook refuses topic `mail.bounce` for good: a dead letter to log.
  webhook = await recordingServer((body) => (body.includes('"mail.bounce"') ? 422 : 200));
  collector = await recordingServer();
});
afterAll(async () => {
  await webhook.close();
  await collector.close();
  await db.drop();
});
beforeEach(() => seed());

/**
 * A fresh outbox with two messages: one written in a producer's trace (the traceparent a create
 * span would have written), one in another trace that will be dead-lettered.
 */
async function seed(): Promise<void> {
  webhook.requests.length = 0;
  collector.requests.length = 0;
  await resetOutbox(db.pool);
  // Written in a producer's trace (the traceparent a create span would have written), and one
  // in another trace that will be dead-lettered.
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    await createOutbox().enqueue(fromPg(client), [
      {
        topic: 'order.created',
        aggregateId: 'order:1',
        payload: { id: 1 },
        headers: { traceparent: `00-${TRACE_ID}-${PRODUCER_SPAN}-01`, tracestate: 'shop=1' },
      },
      {
        topic: 'mail.bounce',
        aggregateId: 'mail:1',
        payload: {},
        headers: { traceparent: `00-${OTHER_TRACE}-b7ad6b7169203331-01` },
      },
    ]);
    await client.query('COMMIT');
  } finally {
    client.release();
  }
}

const dispatchOnce = (env: NodeJS.ProcessEnv, ...flags: string[]) =>
  runCli(
    [
      'dispatch',
      '--once',
      '--database-url',
      db.url,
      '--publisher',
      `${webhook.url}/hook`,
      '--max-attempts',
      '1',
      ...flags,
    ],
    { env: { ...noOtel, ...env } },
  );

const jsonLines = (text: string) =>
  text
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, unknown>);

describe('outbox dispatch with OpenTelemetry', () => {
  it('exports its spans over OTLP/HTTP JSON when OTEL_EXPORTER_OTLP_ENDPOINT is set, and logs JSON lines', async () => {
    const importLog = join(scratch, 'on.log');
    const run = await dispatchOnce(
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_SERVICE_NAME: 'dispatch-under-test',
        OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=ci,team=payments',
        NODE_OPTIONS: `--import ${recorder}`,
        OUTBOX_TEST_IMPORT_LOG: importLog,
      },
      '--log-format',
      'json',
    );
    expect(run.code, run.stderr).toBe(1); // the dead letter
    expect(readFileSync(importLog, 'utf8')).toMatch(/@opentelemetry\/exporter-trace-otlp-http/);

    // The collector got OTLP/JSON on /v1/traces, from our service.
    expect(collector.requests.length).toBeGreaterThan(0);
    for (const request of collector.requests) {
      expect(request.path).toBe('/v1/traces');
      expect(request.headers['content-type']).toMatch(/^application\/json/);
    }
    const exported = collector.requests.map((r) => JSON.parse(r.body) as OtlpExport);
    const resources = exported.flatMap((e) => e.resourceSpans);
    expect(attributes(resources[0]!.resource.attributes)).toMatchObject({
      'service.name': 'dispatch-under-test',
      'service.version': expect.any(String),
      'deployment.environment': 'ci',
      team: 'payments',
    });
    const scopes = resources.flatMap((r) => r.scopeSpans);
    expect(new Set(scopes.map((s) => s.scope.name))).toEqual(new Set(['agent-outbox']));
    const spans = scopes.flatMap((s) => s.spans);

    // The send span continues the producer's trace; the batch span is the dispatcher's own.
    const send = spans.find((s) => s.name === 'send order.created')!;
    expect(send).toMatchObject({ traceId: TRACE_ID, parentSpanId: PRODUCER_SPAN, kind: 4 });
    expect(attributes(send.attributes)).toMatchObject({
      'messaging.system': 'http',
      'messaging.operation.name': 'send',
      'messaging.destination.name': 'order.created',
    });
    const bounce = spans.find((s) => s.name === 'send mail.bounce')!;
    expect(bounce).toMatchObject({ traceId: OTHER_TRACE, status: { code: 2 } });
    expect(attributes(bounce.attributes)).toMatchObject({ 'error.type': 'permanent' });
    const batch = spans.find((s) => s.name === 'dispatch batch')!;
    expect(batch.kind).toBe(1); // INTERNAL
    expect(batch.links?.map((l) => l.traceId).sort()).toEqual([OTHER_TRACE, TRACE_ID].sort());
    expect(send.links?.[0]?.spanId).toBe(batch.spanId);

    // The webhook got the message's trace context as HTTP headers.
    const delivered = webhook.requests.find((r) => r.body.includes('"order.created"'))!;
    expect(delivered.headers.traceparent).toBe(`00-${TRACE_ID}-${PRODUCER_SPAN}-01`);
    expect(delivered.headers.tracestate).toBe('shop=1');

    // One JSON object per line, on both streams; lines inside a batch carry its trace.
    const lines = [...jsonLines(run.stdout), ...jsonLines(run.stderr)];
    for (const line of lines) {
      expect(Object.keys(line).slice(0, 4)).toEqual(['time', 'level', 'msg', 'fields']);
      expect(typeof line.fields).toBe('object');
    }
    expect(
      lines.some((l) => String(l.msg).startsWith('tracing: service dispatch-under-test')),
    ).toBe(true);
    expect(lines.find((l) => l.msg === 'batch settled')).toMatchObject({
      trace_id: batch.traceId,
      span_id: batch.spanId,
    });
    expect(lines.find((l) => l.msg === 'dead-lettered')).toMatchObject({
      level: 'warn',
      trace_id: OTHER_TRACE,
      fields: { topic: 'mail.bounce' },
    });
  });

  it('exports OTLP/HTTP protobuf by default', async () => {
    const run = await dispatchOnce({ OTEL_EXPORTER_OTLP_ENDPOINT: collector.url });
    expect(run.code, run.stderr).toBe(1);
    expect(collector.requests.length).toBeGreaterThan(0);
    expect(collector.requests[0]).toMatchObject({
      path: '/v1/traces',
      headers: { 'content-type': 'application/x-protobuf' },
    });
  });

  it('with tracing off loads no SDK, starts no exporter, and still logs the trace of a dead letter', async () => {
    const importLog = join(scratch, 'off.log');
    const off = await dispatchOnce(
      { NODE_OPTIONS: `--import ${recorder}`, OUTBOX_TEST_IMPORT_LOG: importLog },
      '--json',
    );
    expect(off.code, off.stderr).toBe(1);
    const loaded = existsSync(importLog) ? readFileSync(importLog, 'utf8') : '';
    expect(loaded).not.toMatch(/@opentelemetry\/(sdk-|exporter-|resources)/);
    expect(off.stdout).not.toMatch(/tracing:/);
    expect(jsonLines(off.stderr).find((l) => l.msg === 'dead-lettered')).toMatchObject({
      trace_id: OTHER_TRACE,
    });
    // The message's own trace context still reaches the webhook.
    expect(webhook.requests.some((r) => r.headers.traceparent?.includes(TRACE_ID))).toBe(true);

    // Explicitly off, with an endpoint set: nothing is sent to it.
    await seed();
    const none = await dispatchOnce({
      OTEL_TRACES_EXPORTER: 'none',
      OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    });
    expect(none.code, none.stderr).toBe(1);
    expect(none.stdout).not.toMatch(/tracing:/);
    expect(collector.requests).toEqual([]);
  });

  it('refuses an OTLP protocol it cannot speak, as a usage error', async () => {
    const run = await dispatchOnce({
      OTEL_TRACES_EXPORTER: 'otlp',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
    });
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/grpc/);
  });
});
