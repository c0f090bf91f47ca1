import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSqliteOutbox, openSqlite } from '../../../src/stores/sqlite/index.js';
import { runCli } from '../../helpers/run-cli.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

let dir: string;
let url: string;
let receiver: WebhookReceiver;
let failing = true;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'agent-outbox-cli-sqlite-'));
  url = `file:${join(dir, 'agent.db')}`;
  // Refuses the charge of order 2 while `failing`.
  receiver = await startWebhookReceiver({
    status: (envelope) =>
      failing && envelope.aggregateId === 'order:2' && envelope.topic === 'payment.charge'
        ? 500
        : 200,
  });
});
afterAll(async () => {
  await receiver.close();
  await rm(dir, { recursive: true, force: true });
});

describe('outbox on a SQLite file', () => {
  it('migrates, dispatches, shows status and dead letters, replays (file: and sqlite: URLs)', async () => {
    const migrated = await runCli(['migrate', '--database-url', url]);
    expect(migrated.stdout).toContain('applying 001 initial');
    expect(migrated.code).toBe(0);

    const db = await openSqlite(url);
    const outbox = createSqliteOutbox();
    db.transaction(() => {
      for (const id of ['1', '2'])
        outbox.enqueue(db, [
          { topic: 'payment.charge', aggregateId: `order:${id}`, payload: { id } },
          { topic: 'mail.send', aggregateId: `order:${id}`, payload: { id } },
        ]);
    }).immediate();
    db.close();

    const dispatch = [
      'dispatch',
      '--database-url',
      url,
      '--publisher',
      receiver.url,
      '--once',
      '--max-attempts',
      '1',
    ];
    const first = await runCli(dispatch);
    expect(first.code, first.stderr).toBe(1); // drained with a failure
    expect(receiver.distinct()).toBe(2); // order 1; order 2's charge failed, its mail waits

    const status = await runCli([
      'status',
      '--json',
      '--database-url',
      url.replace('file:', 'sqlite:'),
    ]);
    expect(JSON.parse(status.stdout)).toMatchObject({ backlog: 1, deadLetters: 1 });
    const dead = JSON.parse(
      (await runCli(['dead', 'list', '--json', '--database-url', url])).stdout,
    );
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({ aggregateId: 'order:2', topic: 'payment.charge', attempts: 1 });

    failing = false;
    const replay = await runCli(['replay', dead[0].messageId, '--database-url', url]);
    expect(replay.stdout).toContain('replayed 1 message(s)');
    expect((await runCli(dispatch)).code).toBe(0);
    expect(receiver.distinct()).toBe(4);
    const order2 = receiver.envelopes
      .filter((e) => e.aggregateId === 'order:2')
      .map((e) => e.topic);
    expect(order2).toEqual(['payment.charge', 'mail.send']);

    const limits = await runCli(['limits', '--database-url', url]);
    expect(limits.code).toBe(2);
    expect(limits.stderr).toContain('needs Postgres');
  }, 120_000);

  it('refuses a bad number flag before it opens the file, naming the flag', async () => {
    const fresh = join(dir, 'never-created.db');
    const cases: [string, string, string][] = [
      ['--metrics-port', '70000', '--metrics-port must be at most 65535, got 70000'],
      ['--metrics-port', '0', '--metrics-port must be a positive integer, got "0"'],
      ['--backoff-base-ms', '-5', '--backoff-base-ms must be a number >= 0, got "-5"'],
      ['--backoff-jitter-ms', 'soon', '--backoff-jitter-ms must be a number >= 0, got "soon"'],
    ];
    for (const [flag, value, message] of cases) {
      const run = await runCli([
        'dispatch',
        '--database-url',
        `file:${fresh}`,
        '--publisher',
        receiver.url,
        '--once',
        `${flag}=${value}`,
      ]);
      expect(run.code, `${flag} ${value}: ${run.stderr}`).toBe(2);
      expect(run.stderr).toContain(message);
    }
    expect(existsSync(fresh)).toBe(false);

    // A mistyped path is refused rather than created empty; only `migrate` creates the file.
    for (const command of [
      ['status'],
      ['dead', 'list'],
      ['dispatch', '--publisher', receiver.url],
    ]) {
      const run = await runCli([...command, '--database-url', `file:${fresh}`]);
      expect(run.code, run.stderr).toBe(1);
      expect(run.stderr).toContain(`there is no SQLite file at ${fresh}`);
    }
    expect(existsSync(fresh)).toBe(false);
  }, 60_000);
});
