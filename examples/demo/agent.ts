/**
 * `npm run demo:agent` — the demo through the Agent SDK's real `query()` agent loop.
 *
 * With ANTHROPIC_API_KEY set, a real model places the orders. Without it, a scripted fake
 * Messages API on 127.0.0.1 (fake-messages-api.ts) plays the model: the SDK's bundled CLI talks
 * to it through ANTHROPIC_BASE_URL, so the loop, the MCP tool server and the hooks are all real
 * and nothing leaves the machine. Then the same dispatcher, broker and consumers as `npm start`.
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { runOrdersAgent, scriptedOrdersModel } from './agent-session.js';
import { startFakeMessagesApi, type FakeMessagesApi } from './fake-messages-api.js';
import { createDemoPipeline, failFirstCreateOrderOf } from './pipeline.js';
import { buildReport, formatReport } from './report.js';

const started = Date.now();
const log = (line: string) =>
  console.log(`${String(Date.now() - started).padStart(5)} ms  ${line}`);
const realApi = Boolean(process.env.ANTHROPIC_API_KEY);

const scratch = await mkdtemp(join(tmpdir(), 'agent-outbox-demo-agent-'));
const db = await PGlite.create();
const pipeline = await createDemoPipeline({
  database: { pglite: db },
  mailboxDir: join(scratch, 'mailbox'),
  log,
  // carol's first create_order throws after writing everything: rolled back, then retried.
  injectToolFailure: failFirstCreateOrderOf('u-carol'),
});
log('embedded PGlite ready: outbox schema migrated, orders table created');
pipeline.start();

let api: FakeMessagesApi | undefined;
if (!realApi) {
  api = await startFakeMessagesApi(scriptedOrdersModel());
  log(`no ANTHROPIC_API_KEY: scripted fake Messages API on ${api.url}`);
} else {
  log('ANTHROPIC_API_KEY set: using the real Messages API');
}

// The CLI gets its own HOME (no user settings, no session files) and only what it needs.
const home = join(scratch, 'home');
const env: Record<string, string | undefined> = realApi
  ? { ...process.env, HOME: home, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1' }
  : {
      PATH: process.env.PATH,
      HOME: home,
      ANTHROPIC_BASE_URL: api?.url,
      ANTHROPIC_API_KEY: 'fake-key-for-the-local-fake-api',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    };
await mkdir(home, { recursive: true });

let exitCode = 1;
try {
  const run = await runOrdersAgent({
    example: pipeline.example,
    requestId: `req-${Date.now().toString(36)}`,
    env,
    cwd: home,
    log: (line) => {
      log(line);
      pipeline.dispatcher.wake();
    },
  });
  log(`query() finished: result subtype ${run.subtype ?? '(none)'}`);
  await pipeline.settle();
  log('outbox drained; consumers idle');

  const again = pipeline.publisher.published.find((m) => m.topic === 'payment.charge');
  if (again) {
    const result = await pipeline.redeliver(again);
    log(
      `[broker] redelivered ${again.topic} ${again.aggregateId} → ${result.action} (${result.reason})`,
    );
  }
  // The scripted run is known in advance; a real model's choices are only held to the invariants.
  const report = await buildReport(
    pipeline,
    run.tally,
    realApi
      ? { consumerDuplicates: 1 }
      : { orders: 3, refunds: 1, toolDeduped: 1, consumerDuplicates: 1 },
  );
  for (const line of formatReport(report, run.tally)) console.log(line);
  exitCode = report.ok ? 0 : 1;
} finally {
  await api?.close();
  await pipeline.stop();
  await db.close();
  await rm(scratch, { recursive: true, force: true });
}
console.log(`finished in ${((Date.now() - started) / 1000).toFixed(1)} s`);
process.exitCode = exitCode;
