/**
 * `npm start` — the quick-start demo (SPEC §5), run by main.ts. No server, no API key:
 *
 * 1. embedded Postgres (PGlite, in-process) with the outbox schema and the orders example;
 * 2. a scripted agent calls `create_order` / `refund_order` through a real MCP client (in-memory
 *    transport): a repeated idempotency key (deduped), a call that throws midway (rolled back,
 *    then retried with the same key), a refund;
 * 3. meanwhile the polling dispatcher publishes to an in-memory broker that fails transiently;
 * 4. consumers (the consumer runtime, claim-first) charge, refund and mail — once each, even when
 *    a message is delivered twice on purpose;
 * 5. one approval (issue 20): a refund above 10,000 is committed HELD; the agent's effect status
 *    tool reads "awaiting approval"; a scripted operator lists it (`outbox approvals`) and
 *    approves it (`approveMessages`, as `outbox approve` does); it is then published and
 *    performed, and the status tool reads "performed";
 * 6. a summary with checks; the exit code is 1 if any check fails.
 *
 * `npm run demo:agent` does the same through the Agent SDK's `query()` loop (examples/demo/agent.ts).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { connectInMemory, type QueuedEffect } from '../../src/agent/index.js';
import { approveMessages, listAwaitingApproval } from '../../src/index.js';
import { readMessageFacts } from './message-facts.js';
import { createDemoPipeline, failFirstCreateOrderOf } from './pipeline.js';
import { buildReport, emptyTally, formatReport, tallyToolAnswer } from './report.js';

const started = Date.now();
const log = (line: string) =>
  console.log(`${String(Date.now() - started).padStart(5)} ms  ${line}`);

const mailboxDir = await mkdtemp(join(tmpdir(), 'agent-outbox-demo-mail-'));
const db = await PGlite.create();
// The one injected tool failure: carol's first create_order throws after writing its order row
// and both outbox messages. Her retry (same key) goes through.
const pipeline = await createDemoPipeline({
  database: { pglite: db },
  mailboxDir,
  log,
  injectToolFailure: failFirstCreateOrderOf('u-carol'),
});
log('embedded PGlite ready: outbox schema migrated, orders table created');

const count = async (sql: string) =>
  (await pipeline.executor.query<{ n: number }>(sql)).rows[0]?.n ?? 0;

pipeline.start();
log('dispatcher polling (backoff 50 ms doubling, jitter 20 ms; mail.* unordered)');

const { client, close } = await connectInMemory(pipeline.example.createServer(), {
  name: 'scripted-agent',
  version: '1.0.0',
});
const tools = await client.listTools();
log(`[agent] MCP tools/list: ${tools.tools.map((t) => t.name).join(', ')}`);

const tally = emptyTally();
// Keys come from the application (one per user request), never from the model: a retry of the
// same request reuses its key.
async function call(tool: string, args: Record<string, unknown>, note: string) {
  const answer = await client.callTool({ name: tool, arguments: args });
  const { kind, json } = tallyToolAnswer(tally, answer);
  const detail =
    kind === 'failed'
      ? String(json.error ?? 'error')
      : JSON.stringify((json.result as unknown) ?? null);
  log(
    `[agent] ${tool}(${String(args.idempotency_key)})${note ? ` ${note}` : ''} → ${kind}: ${detail}`,
  );
  dispatcherNudge();
  return json;
}
// A hint only (polling is the guarantee): publish what this call committed without waiting.
const dispatcherNudge = () => pipeline.dispatcher.wake();

const order = (user: string, amount: number, currency: 'JPY' | 'USD', key: string) => ({
  user_id: `u-${user}`,
  email: `${user}@example.com`,
  amount,
  currency,
  idempotency_key: key,
});

await call('create_order', order('alice', 1200, 'JPY', 'req-1001'), '');
const bob = await call('create_order', order('bob', 25, 'USD', 'req-1002'), '');
await call(
  'create_order',
  order('alice', 1200, 'JPY', 'req-1001'),
  '(retried after a timeout, same key)',
);

const ordersBefore = await count('SELECT count(*)::int AS n FROM orders');
const messageCount = async () => (await readMessageFacts(pipeline.executor)).length;
const messagesBefore = await messageCount();
await call('create_order', order('carol', 4800, 'JPY', 'req-1003'), '(fails midway)');
const leftOver =
  (await count('SELECT count(*)::int AS n FROM orders')) -
  ordersBefore +
  ((await messageCount()) - messagesBefore);
log(
  `[check] after the failed call: ${leftOver === 0 ? 'no order and no outbox row left behind (G1)' : `${leftOver} rows LEFT BEHIND`}`,
);
await call('create_order', order('carol', 4800, 'JPY', 'req-1003'), '(retried, same key)');
await call('create_order', order('dave', 300, 'USD', 'req-1004'), '');
const bobOrderId = (bob.result as { orderId: number }).orderId;
await call(
  'refund_order',
  { order_id: bobOrderId, reason: 'customer cancelled', idempotency_key: 'req-1005' },
  '',
);

// One approval: a refund above 10,000 waits for a person (refund_order's approval policy).
const erin = await call('create_order', order('erin', 50_000, 'JPY', 'req-1006'), '');
const erinRefund = await call(
  'refund_order',
  {
    order_id: (erin.result as { orderId: number }).orderId,
    reason: 'arrived damaged',
    idempotency_key: 'req-1007',
  },
  '(50000 JPY: above 10,000)',
);
const held = (erinRefund.queued as QueuedEffect[]).find((q) => q.awaitingApproval);
log(`[agent] ${held?.topic ?? 'nothing'} held: awaiting approval by a person`);
// The model's status tool (read-only): not tallied as a tool call that writes.
async function effectStatus(messageId: string): Promise<Record<string, unknown>> {
  const answer = (await client.callTool({
    name: 'effect_status',
    arguments: { message_ids: [messageId] },
  })) as { content: { text: string }[] };
  const effect = (JSON.parse(answer.content[0]!.text) as { effects: Record<string, unknown>[] })
    .effects[0]!;
  log(`[agent] effect_status(${messageId}) → ${String(effect.state)}`);
  return effect;
}
const statusBefore = held ? await effectStatus(held.messageId) : undefined;

await pipeline.settle();
log('outbox drained, but for the held refund (and its notice mail, ordered behind it)');

// A scripted operator: `outbox approvals`, then `outbox approve <id> --by ops-oscar --note ...`.
const [waiting] = await listAwaitingApproval(pipeline.executor);
if (waiting) {
  log(
    `[operator] outbox approvals: #${waiting.id} ${waiting.topic} ${waiting.aggregateId} ${waiting.payloadSummary}, waiting ${waiting.ageSeconds.toFixed(1)} s, requested by ${waiting.requestedBy ?? '?'}`,
  );
  await approveMessages(pipeline.executor, [waiting.id], {
    by: 'ops-oscar',
    note: 'damage confirmed with the customer',
  });
  log(
    `[operator] approved #${waiting.id} ${waiting.topic} ${waiting.aggregateId} — by ops-oscar (a scripted operator): "damage confirmed with the customer"`,
  );
}
dispatcherNudge();
await pipeline.settle();
const statusAfter = held ? await effectStatus(held.messageId) : undefined;
await close();
log('outbox drained; consumers idle');

// A broker may deliver a message again (lost ack, consumer restart): do it on purpose once.
const again = pipeline.publisher.published.find((m) => m.topic === 'payment.charge');
if (again) {
  const result = await pipeline.redeliver(again);
  log(
    `[broker] redelivered ${again.topic} ${again.aggregateId} → ${result.action} (${result.reason})`,
  );
}

const report = await buildReport(pipeline, tally, {
  orders: 5,
  refunds: 2,
  toolDeduped: 1,
  consumerDuplicates: 1,
});
if (leftOver !== 0)
  report.checks.push({ name: 'failed call rolled back', ok: false, detail: `${leftOver} rows` });
report.checks.push({
  name: 'held refund: awaiting approval, approved by the operator, then performed',
  ok:
    statusBefore?.state === 'awaiting approval' &&
    statusAfter?.state === 'performed' &&
    statusAfter.decidedBy === 'ops-oscar',
  detail: `effect status ${String(statusBefore?.state)} → ${String(statusAfter?.state)} (decided by ${String(statusAfter?.decidedBy)})`,
});
report.ok = report.checks.every((c) => c.ok);
const ok = report.ok && leftOver === 0;
for (const line of formatReport({ ...report, ok }, tally)) console.log(line);
console.log(`finished in ${((Date.now() - started) / 1000).toFixed(1)} s`);

await pipeline.stop();
await db.close();
await rm(mailboxDir, { recursive: true, force: true });
process.exitCode = ok ? 0 : 1;
