/**
 * Draws the README's trace picture from real exported spans (issue 19):
 *
 *   npx tsx scripts/trace-waterfall.ts [docs/tracing-waterfall.svg]
 *
 * One order, end to end, on this machine's Postgres (DATABASE_URL or 127.0.0.1:5432; a
 * database `ao_waterfall_<pid>` is created and dropped) and NATS JetStream (127.0.0.1:4222; a
 * stream `WATERFALL_<pid>` on `shop.>`, deleted after):
 *
 * - the "shop" service (this process, OpenTelemetry SDK): an agent turn calls the `create_order`
 *   tool through MCP (`_meta.traceparent`); the tool writes the order and enqueues
 *   `shop.payment.charge` and `shop.mail.send`;
 * - `outbox dispatch` (a child process, traced through OTEL_EXPORTER_OTLP_ENDPOINT alone)
 *   publishes both to NATS;
 * - the shop's consumers `billing` (transactional) and `mailer` (claim-first) process them.
 *
 * Both services export over OTLP/HTTP JSON to a receiver in this script; the waterfall is
 * rendered from what it received (waterfall-svg.ts).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { context, ROOT_CONTEXT, SpanKind, trace } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { AckPolicy, connect } from 'nats';
import pg from 'pg';
import { z } from 'zod';
import {
  connectInMemory,
  createToolServer,
  outboxTool,
  pgPoolTransactions,
} from '../src/agent/index.js';
import { bindNatsJetStream } from '../src/consumer/bindings/nats.js';
import { createConsumer, createLedger, pgTransactions } from '../src/consumer/index.js';
import { fromPg, migrate } from '../src/index.js';
import { renderWaterfall, spansOf } from './waterfall-svg.js';

const out = process.argv[2] ?? 'docs/tracing-waterfall.svg';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// The receiver both services export to.
const received: unknown[] = [];
const receiver = createServer((request, response) => {
  let body = '';
  request.on('data', (chunk: Buffer) => (body += chunk.toString()));
  request.on('end', () => {
    if (request.url === '/v1/traces') received.push(JSON.parse(body));
    response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
});
await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
const endpoint = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;

const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'shop' }),
  spanProcessors: [
    new BatchSpanProcessor(new OTLPTraceExporter({ url: `${endpoint}/v1/traces` }), {
      scheduledDelayMillis: 200,
    }),
  ],
});
provider.register();
const tracer = trace.getTracer('shop');

const adminUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const database = `ao_waterfall_${process.pid}`;
const dbUrl = Object.assign(new URL(adminUrl), { pathname: `/${database}` }).toString();
const admin = new pg.Client({ connectionString: adminUrl });
await admin.connect();
await admin.query(`CREATE DATABASE ${database}`);
const pool = new pg.Pool({ connectionString: dbUrl });
pool.on('error', () => undefined);
const stream = `WATERFALL_${process.pid}`;
const nc = await connect({ servers: '127.0.0.1:4222' });
const jsm = await nc.jetstreamManager();
let dispatcher: ReturnType<typeof spawn> | undefined;
try {
  await migrate(fromPg(pool));
  await pool.query('CREATE TABLE orders (id serial PRIMARY KEY, item text, cents int)');
  await pool.query('CREATE TABLE charges (order_id int PRIMARY KEY)');
  await jsm.streams.add({ name: stream, subjects: ['shop.>'] });
  for (const [name, subject] of [
    ['billing', 'shop.payment.>'],
    ['mailer', 'shop.mail.>'],
  ] as const)
    await jsm.consumers.add(stream, {
      durable_name: name,
      filter_subject: subject,
      ack_policy: AckPolicy.Explicit,
    });

  // The dispatcher: the CLI, as it runs in production, traced by the environment only.
  dispatcher = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      fileURLToPath(new URL('../src/cli/bin.ts', import.meta.url)),
      'dispatch',
      '--database-url',
      dbUrl,
      '--publisher',
      'nats://127.0.0.1:4222',
      '--nats-stream',
      stream,
      '--log-format',
      'json',
    ],
    {
      env: {
        ...process.env,
        OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_BSP_SCHEDULE_DELAY: '200',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  let log = '';
  dispatcher.stdout!.on('data', (chunk: Buffer) => (log += chunk.toString()));
  while (!log.includes('NATS stream')) await sleep(50);
  await sleep(500); // LISTEN established: the commit wakes it at once

  // The shop's consumers, each effect in its own span under the process span.
  const done = new Set<string>();
  const ledger = createLedger({ runner: pgTransactions(pool) });
  const billing = createConsumer({
    name: 'billing',
    mode: 'transactional',
    ledger,
    handler: async (message, { tx }) => {
      await tracer.startActiveSpan('charge card', { kind: SpanKind.CLIENT }, async (span) => {
        await sleep(12); // the payment API
        span.end();
      });
      await tx.query('INSERT INTO charges (order_id) VALUES ($1)', [
        (message.payload as { orderId: number }).orderId,
      ]);
      done.add(message.topic);
    },
  });
  const mailer = createConsumer({
    name: 'mailer',
    mode: 'claim-first',
    ledger,
    handler: async (message) => {
      await tracer.startActiveSpan('send email', { kind: SpanKind.CLIENT }, async (span) => {
        await sleep(6); // the mail API, with the message id as its idempotency key
        span.end();
      });
      done.add(message.topic);
    },
  });
  const js = nc.jetstream();
  const bindings = [
    await bindNatsJetStream(await js.consumers.get(stream, 'billing'), billing),
    await bindNatsJetStream(await js.consumers.get(stream, 'mailer'), mailer),
  ];

  // The agent's side: a turn that calls the tool over MCP.
  const createOrder = outboxTool({
    name: 'create_order',
    description: 'Creates an order; the card is charged and a receipt mailed afterwards.',
    input: { item: z.string(), cents: z.number().int() },
    transactions: pgPoolTransactions(pool),
    handler: async (input, { tx, outbox }) => {
      const { rows } = await tx.query<{ id: number }>(
        'INSERT INTO orders (item, cents) VALUES ($1, $2) RETURNING id',
        [input.item, input.cents],
      );
      const orderId = rows[0]!.id;
      await outbox.enqueue({
        topic: 'shop.payment.charge',
        aggregateId: `order:${orderId}`,
        payload: { orderId, cents: input.cents },
      });
      await outbox.enqueue({
        topic: 'shop.mail.send',
        aggregateId: `order:${orderId}`,
        payload: { orderId, template: 'receipt' },
      });
      return { orderId };
    },
  });
  const mcp = await connectInMemory(createToolServer({ name: 'shop', tools: [createOrder] }));
  const turn = tracer.startSpan('invoke_agent shop-assistant', {
    attributes: { 'gen_ai.operation.name': 'invoke_agent' },
  });
  const { traceId, spanId } = turn.spanContext();
  await context.with(trace.setSpan(ROOT_CONTEXT, turn), () =>
    mcp.client.callTool({
      name: 'create_order',
      arguments: {
        item: 'espresso machine',
        cents: 24_900,
        idempotency_key: randomBytes(8).toString('hex'),
      },
      _meta: { traceparent: `00-${traceId}-${spanId}-01` },
    }),
  );
  turn.end(); // the agent goes on; the effects follow on their own
  while (done.size < 2) await sleep(20);
  await mcp.close();
  for (const binding of bindings) await binding.stop();

  // Flush both services, then draw.
  dispatcher.kill('SIGTERM');
  await new Promise((resolve) => dispatcher!.once('exit', resolve));
  dispatcher = undefined;
  await provider.shutdown();
  const spans = spansOf(received);
  writeFileSync(
    out,
    renderWaterfall(
      spans,
      traceId,
      'One order, one trace: agent tool call → outbox → NATS → consumers',
    ),
  );
  process.stdout.write(
    `wrote ${out}: ${spans.filter((s) => s.traceId === traceId).length} spans in trace ${traceId}\n`,
  );
} finally {
  dispatcher?.kill('SIGKILL');
  await jsm.streams.delete(stream).catch(() => undefined);
  await nc.close();
  await pool.end();
  await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
  await admin.end();
  receiver.close();
}
