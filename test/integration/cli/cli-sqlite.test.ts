import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSqliteOutbox, openSqlite } from '../../../src/stores/sqlite/index.js';
import { runCli } from '../../helpers/run-cli.js';
import { storeCliScenario } from '../../helpers/store-cli-scenario.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

let dir: string;
let url: string;
let receiver: WebhookReceiver;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'agent-outbox-cli-sqlite-'));
  url = `file:${join(dir, 'agent.db')}`;
  receiver = await startWebhookReceiver();
});
afterAll(async () => {
  await receiver.close();
  await rm(dir, { recursive: true, force: true });
});

describe('outbox on a SQLite file', () => {
  it('migrates, dispatches, shows status and dead letters, replays, prunes (file: and sqlite: URLs)', async () => {
    await storeCliScenario({
      url,
      otherUrl: url.replace('file:', 'sqlite:'),
      async enqueue(messages) {
        const db = await openSqlite(url);
        try {
          db.transaction(() => {
            createSqliteOutbox().enqueue(db, messages);
          }).immediate();
        } finally {
          db.close();
        }
      },
    });
  }, 120_000);

  it('refuses a bad number flag before it opens the file, naming the flag', async () => {
    const fresh = join(dir, 'never-created.db');
    const cases: [string, string, string][] = [
      ['--metrics-port', '70000', '--metrics-port must be at most 65535, got 70000'],
      ['--metrics-port', '0', '--metrics-port must be a positive integer, got "0"'],
      ['--backoff-base-ms', '-5', '--backoff-base-ms must be a number >= 0, got "-5"'],
      ['--backoff-jitter-ms', 'soon', '--backoff-jitter-ms must be a number >= 0, got "soon"'],
      ['--synchronous', 'off', '--synchronous must be normal or full, got "off"'],
      // A Postgres flag the SQLite dispatcher cannot honour is refused, not ignored.
      ['--async-settle', 'true', 'async-settle'],
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
