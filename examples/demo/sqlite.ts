/**
 * `npm start -- --sqlite` — the quick-start demo's orders story on `agent-outbox/sqlite`, on a
 * SQLite file in a temporary directory (deleted at the end). No server, no API key:
 *
 * 1. a SQLite file with the outbox schema (`migrateSqlite`) and an `orders` table;
 * 2. a scripted agent calls `create_order` / `refund_order`: a repeated idempotency key (deduped),
 *    a call that throws midway (rolled back, then retried with the same key), a refund. Each call
 *    is one better-sqlite3 transaction: the order, the call's key and its messages
 *    (`createSqliteOutbox`) commit together or not at all;
 * 3. meanwhile the polling dispatcher (`createSqliteDispatcher`) publishes to an in-memory broker
 *    that fails transiently;
 * 4. the same consumers as the Postgres demo (claim-first, on `createSqliteLedger`) charge,
 *    refund and mail — once each, even when a message is delivered twice on purpose;
 * 5. a summary with the same checks; the exit code is 1 if any check fails.
 *
 * What differs from the Postgres demo, because SQLite does not have it: the tools are plain
 * functions keeping their idempotency keys in a table of the demo's own (agent-outbox/agent's
 * tool-call ledger and its MCP tools are Postgres-only), and there is no approval step
 * (`requiresApproval` is refused on SQLite, docs/sqlite.md).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bindInMemory, type InMemoryBinding } from '../../src/consumer/bindings/in-memory.js';
import type { OutboxMessage } from '../../src/core/message.js';
import { InMemoryPublisher } from '../../src/publishers/memory/in-memory-publisher.js';
import { toEnvelope } from '../../src/publishers/envelope.js';
import {
  createSqliteDispatcher,
  createSqliteLedger,
  createSqliteOutbox,
  migrateSqlite,
  openSqlite,
  type SqliteDatabase,
} from '../../src/stores/sqlite/index.js';
import { FakePaymentProvider } from '../orders/payment-provider.js';
import { Mailbox } from '../orders/mailbox.js';
import { TOPIC } from '../orders/tools.js';
import { createDemoConsumers } from './consumers.js';
import {
  consumerLogger,
  demoDispatchSettings,
  failFirstCreateOrderOf,
  logDispatcher,
  transientBrokerFailures,
  type PipelineCounters,
} from './pipeline.js';
import { assembleReport, emptyTally, formatReport, type MessageFact } from './report.js';

const started = Date.now();
const log = (line: string) =>
  console.log(`${String(Date.now() - started).padStart(5)} ms  ${line}`);

const dir = await mkdtemp(join(tmpdir(), 'agent-outbox-demo-sqlite-'));
const file = join(dir, 'agent.db');
const mailbox = new Mailbox(join(dir, 'mail'));
const provider = new FakePaymentProvider();

// One connection each for the application, the dispatcher and the consumer ledger, as
// docs/sqlite.md advises: every transaction here is synchronous, so none holds the file's write
// lock across an await, and WAL lets the three read while one writes.
const app = await openSqlite(file);
migrateSqlite(app);
// The demo's business tables. `tool_calls` keeps each committed call's idempotency key and
// answer, written in the call's own transaction: a retried request finds it and is answered
// again without writing anything (on Postgres, agent-outbox/agent keeps `outbox_tool_calls`).
app.exec(`
CREATE TABLE IF NOT EXISTS orders (
  id              INTEGER PRIMARY KEY AUTOINCREMENT,
  user_id         TEXT    NOT NULL,
  email           TEXT    NOT NULL,
  amount          INTEGER NOT NULL CHECK (amount > 0),
  currency        TEXT    NOT NULL CHECK (currency IN ('JPY', 'USD')),
  status          TEXT    NOT NULL DEFAULT 'placed' CHECK (status IN ('placed', 'refunded')),
  idempotency_key TEXT    NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS tool_calls (
  idempotency_key TEXT PRIMARY KEY,
  tool            TEXT NOT NULL,
  answer          TEXT NOT NULL
);`);
const dispatcherDb = await openSqlite(file);
const ledgerDb = await openSqlite(file);
log(`SQLite file ready (${file}): outbox schema migrated, orders table created`);

const counters: PipelineCounters = {
  publishRetries: 0,
  latenciesMs: [],
  publishedOnAttempt: [],
  performed: 0,
  consumerDuplicates: 0,
  consumerRetries: 0,
  consumerDead: 0,
};

const publisher = new InMemoryPublisher({ inject: transientBrokerFailures });
const dispatcher = createSqliteDispatcher({
  database: dispatcherDb,
  publisher,
  ...demoDispatchSettings,
});
logDispatcher(dispatcher, counters, log);
const onResult = consumerLogger(counters, log);
const consumers = createDemoConsumers({
  ledger: createSqliteLedger(ledgerDb),
  provider,
  mailbox,
  onResult,
});
const bindings: InMemoryBinding[] = [consumers.payments, consumers.mailer].map((c) =>
  bindInMemory(publisher, c.consumer, { topics: c.topics, maxRetryDelayMs: 500 }),
);
dispatcher.start();
log('dispatcher polling (backoff 50 ms doubling, jitter 20 ms; mail.* unordered)');

// The tools. Each call is one IMMEDIATE transaction on the application's connection.
const outbox = createSqliteOutbox();
const injectFailure = failFirstCreateOrderOf('u-carol');

interface OrderInput {
  user_id: string;
  email: string;
  amount: number;
  currency: 'JPY' | 'USD';
}

function createOrder(db: SqliteDatabase, input: OrderInput, key: string) {
  const { id } = db
    .prepare(
      `INSERT INTO orders (user_id, email, amount, currency, idempotency_key)
       VALUES (?, ?, ?, ?, ?) RETURNING id`,
    )
    .get(input.user_id, input.email, input.amount, input.currency, key) as { id: number };
  const aggregateId = `order:${id}`;
  const money = { orderId: id, amount: input.amount, currency: input.currency };
  const messages: OutboxMessage[] = [
    { topic: TOPIC.charge, aggregateId, payload: { ...money, userId: input.user_id } },
    {
      topic: TOPIC.mail,
      aggregateId,
      payload: { ...money, to: input.email, template: 'order-received' },
    },
  ];
  return { orderId: id, messages };
}

function refundOrder(db: SqliteDatabase, input: { order_id: number; reason?: string }) {
  // The IMMEDIATE transaction holds the file's write lock: no second refund reads 'placed'.
  const order = db
    .prepare('SELECT id, email, amount, currency, status FROM orders WHERE id = ?')
    .get(input.order_id) as
    { id: number; email: string; amount: number; currency: string; status: string } | undefined;
  if (!order) throw new Error(`order ${input.order_id} does not exist`);
  if (order.status === 'refunded') throw new Error(`order ${order.id} is already refunded`);
  db.prepare("UPDATE orders SET status = 'refunded' WHERE id = ?").run(order.id);
  const aggregateId = `order:${order.id}`;
  const money = { orderId: order.id, amount: order.amount, currency: order.currency };
  const messages: OutboxMessage[] = [
    { topic: TOPIC.refund, aggregateId, payload: { ...money, reason: input.reason ?? null } },
    // Ordered behind the refund in the order's aggregate, though mail.* is unordered otherwise.
    {
      topic: TOPIC.mail,
      aggregateId,
      ordered: true,
      payload: { ...money, to: order.email, template: 'order-refunded' },
    },
  ];
  return { orderId: order.id, messages };
}

const tally = emptyTally();
type Answer = { ok: true; deduped: boolean; result: unknown } | { ok: false; error: string };

function call(tool: 'create_order' | 'refund_order', args: Record<string, unknown>, note: string) {
  const key = String(args.idempotency_key);
  let answer: Answer;
  try {
    answer = app
      .transaction((): Answer => {
        const earlier = app
          .prepare('SELECT answer FROM tool_calls WHERE idempotency_key = ?')
          .get(key) as { answer: string } | undefined;
        if (earlier) return { ok: true, deduped: true, result: JSON.parse(earlier.answer) };
        const { orderId, messages } =
          tool === 'create_order'
            ? createOrder(app, args as unknown as OrderInput, key)
            : refundOrder(app, args as { order_id: number; reason?: string });
        const result = { orderId, status: tool === 'create_order' ? 'placed' : 'refunded' };
        outbox.enqueue(app, messages);
        app
          .prepare('INSERT INTO tool_calls (idempotency_key, tool, answer) VALUES (?, ?, ?)')
          .run(key, tool, JSON.stringify(result));
        if (injectFailure(tool, args))
          throw new Error(`${tool} failed after writing its rows and messages (injected failure)`);
        return { ok: true, deduped: false, result };
      })
      .immediate();
  } catch (error) {
    answer = { ok: false, error: error instanceof Error ? error.message : String(error) };
  }
  const kind = !answer.ok ? 'failed' : answer.deduped ? 'deduped' : 'committed';
  tally.calls++;
  tally[kind]++;
  const detail = answer.ok ? JSON.stringify(answer.result) : answer.error;
  log(`[agent] ${tool}(${key})${note ? ` ${note}` : ''} → ${kind}: ${detail}`);
  // A hint only (polling is the guarantee): publish what this call committed without waiting.
  dispatcher.wake();
  return answer;
}

const count = (sql: string) => (app.prepare(sql).get() as { n: number }).n;
const order = (user: string, amount: number, currency: 'JPY' | 'USD', key: string) => ({
  user_id: `u-${user}`,
  email: `${user}@example.com`,
  amount,
  currency,
  idempotency_key: key,
});

call('create_order', order('alice', 1200, 'JPY', 'req-1001'), '');
const bob = call('create_order', order('bob', 25, 'USD', 'req-1002'), '');
call(
  'create_order',
  order('alice', 1200, 'JPY', 'req-1001'),
  '(retried after a timeout, same key)',
);

const rowsNow = () =>
  count('SELECT (SELECT count(*) FROM orders) + (SELECT count(*) FROM outbox) AS n');
const rowsBefore = rowsNow();
call('create_order', order('carol', 4800, 'JPY', 'req-1003'), '(fails midway)');
const leftOver = rowsNow() - rowsBefore;
log(
  `[check] after the failed call: ${leftOver === 0 ? 'no order and no outbox row left behind (G1)' : `${leftOver} rows LEFT BEHIND`}`,
);
call('create_order', order('carol', 4800, 'JPY', 'req-1003'), '(retried, same key)');
call('create_order', order('dave', 300, 'USD', 'req-1004'), '');
const bobOrderId = bob.ok ? (bob.result as { orderId: number }).orderId : 0;
call(
  'refund_order',
  { order_id: bobOrderId, reason: 'customer cancelled', idempotency_key: 'req-1005' },
  '',
);
log('[note] no approval step on SQLite: requiresApproval holds are Postgres-only');

// Every message dispatched (or dead), then the consumers idle.
const deadline = Date.now() + 20_000;
while (
  count(
    'SELECT count(*) AS n FROM outbox WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL',
  ) > 0
) {
  if (Date.now() > deadline) throw new Error('outbox not drained after 20 s');
  dispatcher.wake();
  await new Promise((resolve) => setTimeout(resolve, 25));
}
await Promise.all(bindings.map((b) => b.onIdle()));
log('outbox drained; consumers idle');

// A broker may deliver a message again (lost ack, consumer restart): do it on purpose once.
const again = publisher.published.find((m) => m.topic === TOPIC.charge);
if (again) {
  const result = await consumers.payments.consumer.handle(toEnvelope(again), { attempt: 2 });
  log(
    `[broker] redelivered ${again.topic} ${again.aggregateId} → ${result.action} (${result.reason})`,
  );
}

const orders = app.prepare('SELECT id, status FROM orders ORDER BY id').all() as {
  id: number;
  status: string;
}[];
const messages = (
  app
    .prepare(
      `SELECT message_id AS id, topic, aggregate_id, json_extract(headers, '$.traceparent') AS traceparent,
              dispatched_at IS NOT NULL AS dispatched, dead_lettered_at IS NOT NULL AS dead
         FROM outbox ORDER BY id`,
    )
    .all() as (Omit<MessageFact, 'dispatched' | 'dead'> & { dispatched: number; dead: number })[]
).map((m) => ({ ...m, dispatched: m.dispatched === 1, dead: m.dead === 1 }));
const report = await assembleReport(
  {
    orders,
    messages,
    toolKeys: count('SELECT count(*) AS n FROM tool_calls'),
    approvals: { held: 0, approved: 0, rejected: 0, waiting: 0, approvers: '' },
    provider,
    mailbox,
    counters,
    published: publisher.published.length,
    traceContext: false,
  },
  tally,
  { orders: 4, refunds: 1, toolDeduped: 1, consumerDuplicates: 1 },
);
if (leftOver !== 0)
  report.checks.push({ name: 'failed call rolled back', ok: false, detail: `${leftOver} rows` });
report.ok = report.checks.every((c) => c.ok);
for (const line of formatReport(report, tally)) console.log(line);
console.log(`finished in ${((Date.now() - started) / 1000).toFixed(1)} s`);

await dispatcher.stop();
await Promise.all(bindings.map((b) => b.stop()));
for (const db of [app, dispatcherDb, ledgerDb]) db.close();
await rm(dir, { recursive: true, force: true });
process.exitCode = report.ok ? 0 : 1;
