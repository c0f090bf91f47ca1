import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOutbox, fromPg, readEffectStatus, type OutboxMessage } from '../../../src/index.js';
import { dispatchArgs, startCli, type CliProcess } from '../../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { requirePgBouncer, startPgBouncer, type PgBouncer } from '../../helpers/pgbouncer.js';
import { runCli } from '../../helpers/run-cli.js';
import { enqueueLanes } from '../../helpers/lanes.js';
import { noopPublisher } from '../../helpers/held-snapshot.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import type { DashboardState } from '../../../src/dashboard/index.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

/**
 * Issue 41: what operators run, through PgBouncer 1.18 in transaction mode with nothing but
 * `--database-url` set to the pooler — `outbox migrate` (a no-op here), approvals, `outbox
 * dispatch --once`, effect status, `outbox status`, `outbox dead list`, `outbox prune`, the
 * dashboard — and what `outbox dispatch` says when LISTEN
 * goes through the pooler (it hears nothing there) versus with `--listen-url` direct.
 */
const runs = requirePgBouncer();
const outbox = createOutbox();

let db: TestDatabase;
let bouncer: PgBouncer;
let pooledUrl: string;
let pooled: pg.Pool;
let receiver: WebhookReceiver;
const processes: CliProcess[] = [];
beforeAll(async () => {
  if (!runs) return;
  db = await createTestDatabase();
  bouncer = await startPgBouncer(db.url);
  pooledUrl = bouncer.url(db.url);
  pooled = new pg.Pool({ connectionString: pooledUrl, max: 4 });
  pooled.on('error', () => undefined);
  receiver = await startWebhookReceiver();
});
afterAll(async () => {
  if (!runs) return;
  for (const p of processes) if (p.child.exitCode === null) p.child.kill('SIGKILL');
  await receiver?.close();
  await pooled?.end();
  await bouncer?.stop();
  await db?.drop();
});

/** Enqueues `messages` in one transaction through the pooler, as the docs say to. */
async function enqueue(messages: OutboxMessage[]) {
  const client = await pooled.connect();
  try {
    await client.query('BEGIN');
    const written = await outbox.enqueue(fromPg(client, { preparedStatements: false }), messages);
    await client.query('COMMIT');
    return written;
  } finally {
    client.release();
  }
}

const cli = (...args: string[]) => runCli([...args, '--database-url', pooledUrl]);

/** `outbox dispatch` as deployed: LISTEN on (the default), its default poll intervals. */
const listening = () => ['dispatch', '--database-url', pooledUrl, '--publisher', receiver.url];

/** Waits until `process`'s output matches `pattern`; returns the match. */
async function waitFor(process: CliProcess, pattern: RegExp): Promise<RegExpMatchArray> {
  await expect.poll(() => pattern.test(process.output()), { timeout: 30_000 }).toBe(true);
  return process.output().match(pattern)!;
}

describe.runIf(runs)('operations through PgBouncer in transaction mode (issue 41)', () => {
  it('migrate, approvals, approve, reject, dispatch --once, effect status, status, dead list, prune: all through the pooler', async () => {
    const migrated = await cli('migrate', '--engine', 'claims');
    expect(migrated.code, migrated.stderr).toBe(0);
    const [held, after] = await enqueue([
      { topic: 'payment.refund', aggregateId: 'order:1', payload: {}, requiresApproval: true },
      { topic: 'mail.send', aggregateId: 'order:1', payload: {} },
    ]);
    const [refused] = await enqueue([
      { topic: 'payment.refund', aggregateId: 'order:9', payload: {}, requiresApproval: true },
    ]);
    const rejected = await cli('reject', refused!.id, '--by', 'bob', '--reason', 'duplicate');
    expect(rejected.code, rejected.stderr).toBe(0);
    const listed = await cli('approvals', '--json');
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout)).toEqual([expect.objectContaining({ id: held!.id })]);
    const approved = await cli('approve', held!.id, '--by', 'alice');
    expect(approved.code, approved.stderr).toBe(0);

    const dispatched = await runCli([...dispatchArgs(pooledUrl, receiver.url, '--once')]);
    expect(dispatched.code, dispatched.stderr).toBe(0);
    expect(receiver.envelopes.map((e) => e.id)).toEqual([held!.messageId, after!.messageId]);

    const { effects } = await readEffectStatus(fromPg(pooled), {
      messageIds: [held!.messageId, after!.messageId],
    });
    expect(effects.map((e) => e.state)).toEqual(['published', 'published']);

    const status = await cli('status', '--json');
    expect(status.code, status.stderr).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ backlog: 0, rejected: 1 });
    const dead = await cli('dead', 'list', '--json');
    expect(dead.code, dead.stderr).toBe(0);
    expect(JSON.parse(dead.stdout)).toEqual([]);
    const pruned = await cli('prune', '--older-than', '1s');
    expect(pruned.code, pruned.stderr).toBe(0);
    expect(pruned.stdout).toMatch(/Done/);
  }, 180_000);

  it('the dashboard: its page and its data through the pooler', async () => {
    const ui = startCli(['ui', '--port', '0', '--database-url', pooledUrl]);
    processes.push(ui);
    const [, url] = await waitFor(ui, / at (http:\/\/\S+)/);
    expect((await fetch(url!)).status).toBe(200);
    const state = await fetch(`${url}api/state`);
    expect(state.status).toBe(200);
    expect(await state.json()).toMatchObject({ status: { backlog: 0, deadLetters: 0 } });
    ui.child.kill('SIGTERM');
    expect(await ui.exited).toBe(0);
  });

  it('the lanes dashboard through the pooler: its samples count a lanes drain', async () => {
    const ui = startCli([
      'ui',
      '--engine',
      'lanes',
      '--port',
      '0',
      '--sample-interval-ms',
      '200',
      '--database-url',
      pooledUrl,
    ]);
    processes.push(ui);
    const [, url] = await waitFor(ui, / at (http:\/\/\S+)/);
    await enqueueLanes(
      pooled,
      Array.from({ length: 10 }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: `l:${i}`,
        payload: {},
      })),
      { preparedStatements: false },
    );
    const state = async () => (await (await fetch(`${url}api/state`)).json()) as DashboardState;
    await expect.poll(async () => (await state()).status.backlog, { timeout: 20_000 }).toBe(10);
    await createLaneDispatcher({ executor: fromPg(db.pool), publisher: noopPublisher }).drain();
    const published = (s: DashboardState) =>
      Math.round(
        s.samples.reduce((sum, p, i) => {
          const before = s.samples[i - 1];
          return before ? sum + ((p.publishedPerSecond ?? 0) * (p.at - before.at)) / 1000 : sum;
        }, 0),
      );
    await expect.poll(async () => published(await state()), { timeout: 20_000 }).toBe(10);
    const last = await state();
    expect(last).toMatchObject({ engine: 'lanes', status: { backlog: 0, deadLetters: 0 } });
    expect(last.sampleError).toBeUndefined();
    ui.child.kill('SIGTERM');
    expect(await ui.exited).toBe(0);
  });

  it('dispatch with LISTEN through the pooler says so at start and polls; with --listen-url direct it listens', async () => {
    const throughPooler = startCli(listening());
    processes.push(throughPooler);
    await waitFor(throughPooler, /LISTEN through --database-url .* heard nothing/);
    expect(throughPooler.output()).toMatch(/--listen-url/);
    // The start-up line, after the check: polling only.
    await waitFor(throughPooler, /listen=false/);
    const [polled] = await enqueue([{ topic: 'mail.send', aggregateId: 'order:2', payload: {} }]);
    await expect
      .poll(() => receiver.envelopes.some((e) => e.id === polled!.messageId), { timeout: 30_000 })
      .toBe(true);
    throughPooler.child.kill('SIGTERM');
    expect(await throughPooler.exited).toBe(0);

    const direct = startCli([...listening(), '--listen-url', db.url]);
    processes.push(direct);
    await waitFor(direct, /listen=true/);
    expect(direct.output()).not.toMatch(/heard nothing/);
    const [woken] = await enqueue([{ topic: 'mail.send', aggregateId: 'order:3', payload: {} }]);
    await expect
      .poll(() => receiver.envelopes.some((e) => e.id === woken!.messageId), { timeout: 30_000 })
      .toBe(true);
    direct.child.kill('SIGTERM');
    expect(await direct.exited).toBe(0);
  }, 180_000);

  it('--listen-url is refused with --no-listen (exit 2)', async () => {
    const result = await runCli([
      ...dispatchArgs(pooledUrl, receiver.url, '--no-listen', '--listen-url', db.url),
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/--listen-url .* drop it with --no-listen/);
  });
});
