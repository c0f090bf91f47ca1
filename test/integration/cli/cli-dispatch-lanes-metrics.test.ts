import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OutboxMessage } from '../../../src/core/message.js';
import { startCli, type CliProcess } from '../../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';
import { runCli } from '../../helpers/run-cli.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';
import { eventually, freePort } from '../../fixtures/ops/tools.js';

/**
 * `outbox dispatch --engine lanes --metrics-port` and `outbox status --engine lanes` as an
 * operator runs them: the dispatcher in its own process, /metrics and /healthz scraped over HTTP.
 */
let db: TestDatabase;
let receiver: WebhookReceiver;
const running: CliProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  // Refuses every charge: one dead letter with --max-attempts 1.
  receiver = await startWebhookReceiver({
    status: (e) => (e.topic === 'payment.charge' ? 500 : 200),
  });
});
afterAll(async () => {
  for (const cli of running)
    if (cli.child.exitCode === null) {
      cli.child.kill('SIGKILL');
      await cli.exited;
    }
  await receiver?.close();
  await db?.drop();
});

const write = (messages: readonly OutboxMessage[]) => enqueueLanes(db.pool, messages);

const mails = (n: number, prefix: string) =>
  Array.from({ length: n }, (_, i) => ({
    topic: 'mail.send',
    aggregateId: `${prefix}-${i}`,
    payload: { i },
  }));

function sample(body: string, series: string): number | undefined {
  const line = body.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

async function status(): Promise<Record<string, unknown>> {
  const result = await runCli(['status', '--engine', 'lanes', '--json', '--database-url', db.url]);
  expect(result.code, result.stderr).toBe(0);
  return JSON.parse(result.stdout) as Record<string, unknown>;
}

describe('outbox dispatch --engine lanes --metrics-port', () => {
  it('outbox status --engine lanes counts the backlog; /metrics counts the drain and the dead letter', async () => {
    await write([
      ...mails(7, 'a'),
      { topic: 'payment.charge', aggregateId: 'order-1', payload: {} },
    ]);
    expect(await status()).toMatchObject({
      backlog: 8,
      dueNow: 8,
      deadLetters: 0,
      backlogEstimated: false,
    });
    // The claim engine's status knows nothing of the lanes.
    const claims = await runCli(['status', '--json', '--database-url', db.url]);
    expect(JSON.parse(claims.stdout)).toMatchObject({ backlog: 0 });

    const port = await freePort();
    const cli = startCli([
      'dispatch',
      '--engine',
      'lanes',
      '--database-url',
      db.url,
      '--publisher',
      receiver.url,
      '--max-attempts',
      '1',
      '--metrics-port',
      String(port),
      '--metrics-host',
      '127.0.0.1',
      '--health-stall-ms',
      '60000',
    ]);
    running.push(cli);
    const body = await eventually('7 published and 1 dead letter in /metrics', async () => {
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      return sample(text, 'outbox_messages_published_total{topic="mail.send"}') === 7 &&
        sample(text, 'outbox_messages_dead_lettered_total{topic="payment.charge"}') === 1
        ? text
        : undefined;
    });
    expect(sample(body, 'outbox_dispatch_latency_seconds_count{topic="mail.send"}')).toBe(7);
    expect(
      sample(body, 'outbox_publish_failures_total{topic="payment.charge",kind="permanent"}') ??
        sample(body, 'outbox_publish_failures_total{topic="payment.charge",kind="retryable"}'),
    ).toBe(1);
    expect(body).toContain('# TYPE outbox_pending_messages gauge');
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
    expect(cli.output()).toMatch(/metrics on http:\/\/127\.0\.0\.1:\d+\/metrics/);
    cli.child.kill('SIGTERM');
    expect(await cli.exited, cli.output()).toBe(0);

    expect(await status()).toMatchObject({ backlog: 0, dueNow: 0, deadLetters: 1 });
    // One line per schema: the lanes engine's numbers with --engine lanes.
    const schemas = (engine: string) =>
      runCli([
        'status',
        '--engine',
        engine,
        '--schemas',
        'publi*',
        '--json',
        '--database-url',
        db.url,
      ]);
    const lanes = await schemas('lanes');
    expect(lanes.code, lanes.stderr).toBe(0);
    expect(JSON.parse(lanes.stdout).databases).toMatchObject([
      { database: `${db.name}/public`, deadLetters: 1 },
    ]);
    expect(JSON.parse((await schemas('claims')).stdout).databases).toMatchObject([
      { database: `${db.name}/public`, deadLetters: 0 },
    ]);
    const text = await runCli(['status', '--engine', 'lanes', '--database-url', db.url]);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toContain('outbox dead list --engine lanes');
  }, 60_000);

  it('/healthz answers 503 while due messages wait on a destination that never answers', async () => {
    // Accepts connections and never answers: the publish hangs, nothing goes out.
    const silent: Server = createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const address = silent.address() as { port: number };
    try {
      await write(mails(4, 'stuck'));
      const port = await freePort();
      const cli = startCli([
        'dispatch',
        '--engine',
        'lanes',
        '--database-url',
        db.url,
        '--publisher',
        `http://127.0.0.1:${address.port}/hook`,
        '--http-timeout-ms',
        '60000',
        '--metrics-port',
        String(port),
        '--health-stall-ms',
        '1000',
      ]);
      running.push(cli);
      const health = await eventually('healthz 503', async () => {
        const response = await fetch(`http://127.0.0.1:${port}/healthz`);
        return response.status === 503
          ? ((await response.json()) as { reason: string; dueNow: number })
          : undefined;
      });
      expect(health.dueNow).toBe(4);
      expect(health.reason).toMatch(/4 messages due and none dispatched/);
      const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      expect(sample(metrics, 'outbox_pending_messages')).toBe(4);
      expect(sample(metrics, 'outbox_due_messages')).toBe(4);
      cli.child.kill('SIGKILL');
      await cli.exited;
    } finally {
      silent.closeAllConnections();
      await new Promise((resolve) => silent.close(resolve));
    }
  }, 60_000);
});
