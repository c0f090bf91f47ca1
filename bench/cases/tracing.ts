import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { context, propagation, trace } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  BatchSpanProcessor,
  NodeTracerProvider,
  type ReadableSpan,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-node';
import { createDispatcher, createLaneDispatcher, fromPg } from '../../src/index.js';
import { startBatchTrace } from '../../src/dispatcher/dispatch-spans.js';
import { HttpPublisher } from '../../src/publishers/http/index.js';
import { NatsJetStreamPublisher } from '../../src/publishers/nats/index.js';
import type { OutgoingMessage, Publisher } from '../../src/publishers/publisher.js';
import type { BenchDatabase } from '../lib/database.js';
import { resetOutbox } from '../lib/database.js';
import { log, round, timed } from '../lib/measure.js';
import { noopPublisher } from './enqueue.js';

/** Where the broker comparison publishes (NATS_URL overrides). */
const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';

/**
 * `tracing_overhead` (issue 19): our dispatcher's rate with the real OpenTelemetry SDK recording
 * every span (a batch span per claim, a send span per message) and exporting them with the
 * SDK's defaults — BatchSpanProcessor, OTLP/HTTP protobuf — to an endpoint that discards them,
 * over the rate with no SDK registered at all (the library's no-op path), same rows, same run,
 * alternated. Every row carries a sampled `traceparent`, as rows written by a traced application
 * do, so each send span is a child of its message's trace.
 *
 * Three publishers, three figures:
 * - `broker` (the key): NATS JetStream, each publish acknowledged by the server — dispatch as
 *   it runs in a deployment, and the broker of the issue's own end-to-end trace test;
 * - `noop` (`tracing_overhead_noop`): a publisher that does nothing — the worst case, nothing per
 *   message but our claim and settle for the spans' cost to hide behind. On this two-core
 *   machine the SDK's own CPU per span (start + end ~7 µs, OTLP protobuf encoding ~7 µs, HTTP
 *   ~3 µs, measured apart: README "Tracing") is about as much as our whole dispatch per message
 *   in Node, and the machine is CPU-bound, so this one stays near 0.65–0.75;
 * - `http`: an HttpPublisher posting each message to a local sink.
 *
 * The endpoint is a separate process (a collector is not in the dispatcher's process); the
 * spans the processor dropped (its queue holds 2,048 by default) are reported beside the figure,
 * since a drop is work not done.
 *
 * Measured in `pairs` back-to-back pairs (which side goes first alternates), after a warm-up of
 * both; the figure is the median of the pairs' ratios. Best-of-N for each side apart, as the
 * other dispatch cases do, moved from 0.36 to 0.88 between runs here: on a shared two-core
 * machine one side would get the quiet minute. A pair's two drains share their minute.
 *
 * `lanesBroker`: the key's comparison (NATS JetStream) on the lanes engine
 * (`createLaneDispatcher`, same batch size, rows written through `outbox_lane_inbox` with the
 * same headers): the engine a new schema runs on, `tracing_overhead` since session 33 (`broker`,
 * the claim engine's, was the key before).
 */
export async function tracingOverhead(db: BenchDatabase, count: number, pairs: number) {
  const sink = await startDiscardingSink();
  let broker: Comparison | { skipped: string };
  let lanesBroker: Comparison | { skipped: string };
  let noop: Comparison;
  let http: Comparison;
  try {
    broker = await natsComparison(db, sink.url, Math.ceil(count / 2.5), pairs);
    lanesBroker = await natsComparison(db, sink.url, Math.ceil(count / 2.5), pairs, 'lanes');
    noop = await compare(db, sink.url, noopPublisher, count, pairs);
    // Context: the same with a publisher that does I/O, the shape of a real deployment.
    const webhook = new HttpPublisher({ url: `${sink.url}/hook` });
    http = await compare(db, sink.url, webhook, Math.ceil(count / 5), 3);
  } finally {
    sink.process.kill();
  }
  const noSdk = noSdkBatchCost();
  log(
    `tracing: NATS JetStream ${'ratio' in broker ? `${broker.ratio} (median of ${pairs} pairs: ${broker.ratios.join(', ')}; CPU per message ${broker.cpuMicrosPerMessage.withSdk} vs ${broker.cpuMicrosPerMessage.withoutSdk} µs)` : broker.skipped}; ` +
      `no-op publisher ${noop.ratio} (${noop.ratios.join(', ')}; CPU per message ${noop.cpuMicrosPerMessage.withSdk} vs ${noop.cpuMicrosPerMessage.withoutSdk} µs; ` +
      `${noop.spans.exported} of ${noop.spans.ended} spans exported); HTTP publisher ${http.ratio}; ` +
      `no-SDK batch path ${noSdk.nsPerBatch} ns per batch of 200; ` +
      `lanes engine, NATS JetStream ${'ratio' in lanesBroker ? `${lanesBroker.ratio} (${lanesBroker.ratios.join(', ')}; CPU per message ${lanesBroker.cpuMicrosPerMessage.withSdk} vs ${lanesBroker.cpuMicrosPerMessage.withoutSdk} µs)` : lanesBroker.skipped}`,
  );
  return { broker, noop, http, noSdk, lanesBroker };
}

/**
 * The comparison through a NatsJetStreamPublisher into a stream of this run (created here,
 * deleted after), or why it was skipped (no NATS server).
 */
async function natsComparison(
  db: BenchDatabase,
  sinkUrl: string,
  count: number,
  pairs: number,
  engine: Engine = 'claims',
): Promise<Comparison | { skipped: string }> {
  const { connect } = await import('nats');
  let nc: Awaited<ReturnType<typeof connect>>;
  try {
    nc = await connect({ servers: NATS_URL, timeout: 2_000 });
  } catch (error) {
    const why = `no NATS server at ${NATS_URL} (${(error as Error).message}): start one (../shared/DEPENDENCIES.md) or set NATS_URL`;
    log(`tracing_overhead: n/a, ${why}`);
    return { skipped: why };
  }
  const name = `AO_BENCH_TRACING_${process.pid}`;
  const publisher = new NatsJetStreamPublisher({
    connection: nc,
    subjectPrefix: `aobench${process.pid}.`,
    stream: { name, subjects: [`aobench${process.pid}.>`] },
  });
  try {
    return await compare(db, sinkUrl, publisher, count, pairs, engine);
  } finally {
    await publisher.close();
    await (await nc.jetstreamManager()).streams.delete(name).catch(() => undefined);
    await nc.close();
  }
}

type Comparison = Awaited<ReturnType<typeof compare>>;
type Engine = 'claims' | 'lanes';

/**
 * `pairs` back-to-back drains of `count` rows through `publisher`, with and without the SDK,
 * after a warm-up of both: the median of the pairs' ratios.
 */
async function compare(
  db: BenchDatabase,
  sinkUrl: string,
  publisher: Publisher,
  count: number,
  pairs: number,
  engine: Engine = 'claims',
) {
  const spans = { ended: 0, exported: 0 };
  const rate = (d: BenchDatabase, rows: number, p: Publisher) =>
    engine === 'lanes' ? laneRate(d, rows, p) : claimRate(d, rows, p);
  const withSdk = async (rows: number) => {
    const sdk = registerSdk(sinkUrl);
    try {
      return await rate(db, rows, publisher);
    } finally {
      await sdk.provider.shutdown();
      trace.disable();
      context.disable();
      propagation.disable();
      spans.ended += sdk.ended();
      spans.exported += sdk.exported();
    }
  };
  const runs: { withoutSdk: Drain; withSdk: Drain }[] = [];
  const warmUp = Math.min(count, 4_000);
  await rate(db, warmUp, publisher);
  await withSdk(warmUp);
  spans.ended = spans.exported = 0;
  for (let p = 0; p < pairs; p++) {
    if (p % 2 === 0) {
      const withoutSdk = await rate(db, count, publisher);
      runs.push({ withoutSdk, withSdk: await withSdk(count) });
    } else {
      const sdk = await withSdk(count);
      runs.push({ withoutSdk: await rate(db, count, publisher), withSdk: sdk });
    }
  }
  const ratios = runs.map((r) => r.withSdk.rowsPerSecond / r.withoutSdk.rowsPerSecond);
  const side = (pick: (r: (typeof runs)[number]) => number, digits: number) =>
    round(middle(runs.map(pick)), digits);
  return {
    ratio: round(middle(ratios), 3),
    ratios: ratios.map((r) => round(r, 2)),
    rowsPerSecond: {
      withSdk: side((r) => r.withSdk.rowsPerSecond, 0),
      withoutSdk: side((r) => r.withoutSdk.rowsPerSecond, 0),
    },
    /**
     * CPU time of this process per message (user + system): what the spans and their export
     * cost, less exposed to the machine's load than the rates.
     */
    cpuMicrosPerMessage: {
      withSdk: side((r) => r.withSdk.cpuMicrosPerMessage, 1),
      withoutSdk: side((r) => r.withoutSdk.cpuMicrosPerMessage, 1),
    },
    pairs: runs.map((r) => ({
      withSdk: Math.round(r.withSdk.rowsPerSecond),
      withoutSdk: Math.round(r.withoutSdk.rowsPerSecond),
    })),
    spans,
  };
}

interface Drain {
  rowsPerSecond: number;
  cpuMicrosPerMessage: number;
}

/** Drains `count` fresh unordered rows through `publisher`. */
async function claimRate(db: BenchDatabase, count: number, publisher: Publisher): Promise<Drain> {
  await resetOutbox(db.pool);
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload, headers)
     SELECT 'agg-' || g, 'mail.send', jsonb_build_object('n', g),
            jsonb_build_object('traceparent',
              '00-' || md5(g::text) || '-' || substr(md5('s' || g), 1, 16) || '-01',
              'schema_version', '1')
     FROM generate_series(1, $1) g ORDER BY g`,
    [count],
  );
  await db.pool.query('VACUUM ANALYZE outbox');
  return timedDrain(count, () =>
    createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      batchSize: 200,
      unorderedTopics: ['mail.*'],
    }),
  );
}

/** {@link claimRate} on the lanes engine: the same rows, written through `outbox_lane_inbox`. */
async function laneRate(db: BenchDatabase, count: number, publisher: Publisher): Promise<Drain> {
  await db.pool.query('TRUNCATE outbox_lane_messages, outbox_lane_parked');
  await db.pool.query(
    `INSERT INTO outbox_lane_inbox (topic, aggregate_id, payload, headers, ordered)
     SELECT 'mail.send', 'agg-' || g, jsonb_build_object('n', g),
            jsonb_build_object('traceparent',
              '00-' || md5(g::text) || '-' || substr(md5('s' || g), 1, 16) || '-01'),
            false
     FROM generate_series(1, $1) g ORDER BY g`,
    [count],
  );
  await db.pool.query('VACUUM ANALYZE outbox_lane_messages');
  return timedDrain(count, () =>
    createLaneDispatcher({ executor: fromPg(db.pool), publisher, batchSize: 200 }),
  );
}

/** One drain by a dispatcher made inside the timing (as before), its rate and CPU a message. */
async function timedDrain(
  count: number,
  create: () => { drain(): Promise<{ published: number }> },
): Promise<Drain> {
  let published = 0;
  const cpu = process.cpuUsage();
  const ms = await timed(async () => {
    published = (await create().drain()).published;
  });
  const used = process.cpuUsage(cpu);
  if (published !== count) throw new Error(`dispatched ${published} of ${count}`);
  return {
    rowsPerSecond: (count / ms) * 1000,
    cpuMicrosPerMessage: (used.user + used.system) / count,
  };
}

/** The median; of an even count, the mean of the two middle values. */
function middle(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const half = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[half]! : (sorted[half - 1]! + sorted[half]!) / 2;
}

/** The SDK as `outbox dispatch` registers it with OTEL_EXPORTER_OTLP_ENDPOINT set. */
function registerSdk(url: string) {
  let ended = 0;
  let exported = 0;
  const otlp = new OTLPTraceExporter({ url: `${url}/v1/traces` });
  const counting: SpanExporter = {
    export: (batch: ReadableSpan[], done) => {
      exported += batch.length;
      otlp.export(batch, done);
    },
    shutdown: () => otlp.shutdown(),
    forceFlush: () => otlp.forceFlush(),
  };
  const processor = new BatchSpanProcessor(counting);
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'agent-outbox-bench' }),
    spanProcessors: [
      processor,
      {
        onStart: () => undefined,
        onEnd: () => void ended++,
        forceFlush: async () => undefined,
        shutdown: async () => undefined,
      },
    ],
  });
  // As `outbox dispatch` registers it (src/cli/telemetry.ts): no async context manager.
  provider.register({ contextManager: null });
  return { provider, ended: () => ended, exported: () => exported };
}

/** An OTLP/HTTP endpoint in a child process that reads each request and throws it away. */
async function startDiscardingSink(): Promise<{ url: string; process: ChildProcess }> {
  const child = spawn(
    process.execPath,
    [
      '-e',
      `require('node:http').createServer((q, s) => { q.resume(); q.on('end', () => s.writeHead(200, { 'content-type': q.url === '/v1/traces' ? 'application/x-protobuf' : 'application/json' }).end()); })
        .listen(0, '127.0.0.1', function () { console.log(this.address().port); });`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const [chunk] = (await once(child.stdout!, 'data')) as [Buffer];
  return { url: `http://127.0.0.1:${chunk.toString().trim()}`, process: child };
}

/**
 * What the dispatcher's tracing costs per batch with no SDK registered: one no-op span to find
 * out, then nothing per message (dispatch-spans.ts). Timed over 100,000 batches of 200.
 */
function noSdkBatchCost() {
  const messages: OutgoingMessage[] = Array.from({ length: 200 }, (_, i) => ({
    id: `m${i}`,
    rowId: String(i),
    topic: 'mail.send',
    aggregateId: `agg-${i}`,
    sequence: 1,
    payload: {},
    headers: { traceparent: `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01` },
    createdAt: new Date(),
    attempts: 1,
  }));
  const batches = 100_000;
  let live = 0;
  const started = process.hrtime.bigint();
  for (let i = 0; i < batches; i++) if (startBatchTrace('d', `d#${i}`, messages, 0)) live++;
  const ns = Number(process.hrtime.bigint() - started) / batches;
  if (live > 0) throw new Error('an SDK is registered: the no-SDK cost cannot be measured');
  return { nsPerBatch: Math.round(ns), nsPerMessage: round(ns / messages.length, 2) };
}
