import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createVerifyingReceiver } from '../../../examples/webhook-receiver/verifying-receiver.js';
import { startDashboard } from '../../../src/dashboard/server.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted, manyMessages, resetOutbox } from '../../helpers/outbox-fixtures.js';
import { runCli, type CliResult } from '../../helpers/run-cli.js';
import { startTestWebhook, type TestWebhook } from '../publishers/http-test-server.js';

// The receiver is examples/webhook-receiver: it verifies with the `standardwebhooks` package,
// not with our code, so a pass means any Standard Webhooks library accepts our requests.
const secretOf = (bytes = 32) => `whsec_${randomBytes(bytes).toString('base64')}`;
const SECRET = secretOf();

let db: TestDatabase;
let receiver: Server;
let receiverUrl: string;
const verified: { id: string; envelope: unknown }[] = [];
const refused: string[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  receiver = createVerifyingReceiver({
    secret: SECRET,
    onWebhook: (webhook) => void verified.push(webhook),
    onRefused: (reason) => void refused.push(reason),
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/outbox`;
});
afterAll(async () => {
  receiver.closeAllConnections();
  await new Promise((resolve) => receiver.close(resolve));
  await db.drop();
});
beforeEach(async () => {
  verified.length = 0;
  refused.length = 0;
  await resetOutbox(db.pool);
});

/** `outbox dispatch --once` against this file's database, with `env` added. */
const dispatchOnce = (flags: string[], env: NodeJS.ProcessEnv = {}) =>
  runCli(['dispatch', '--once', '--database-url', db.url, ...flags], {
    env: { OUTBOX_WEBHOOK_SECRET: undefined, ...env },
  });

const secretFile = (text: string) => {
  const path = join(mkdtempSync(join(tmpdir(), 'outbox-secret-')), 'webhook-secrets');
  writeFileSync(path, text, { mode: 0o600 });
  return path;
};

const backlog = async () =>
  JSON.parse((await runCli(['status', '--json', '--database-url', db.url])).stdout).backlog;

/** Fails when any of `texts` holds the secret, whole or as its bare base64 key. */
function expectNoSecret(secret: string, texts: Record<string, string>): void {
  const key = secret.slice('whsec_'.length).replace(/=+$/, '');
  for (const [where, text] of Object.entries(texts)) {
    expect(text.includes(key.slice(0, 16)), `${where} contains the secret`).toBe(false);
  }
}

describe('outbox dispatch signs webhooks (Standard Webhooks)', () => {
  it('OUTBOX_WEBHOOK_SECRET=whsec_… dispatch --once: every request verifies with standardwebhooks', async () => {
    await enqueueCommitted(db.pool, [
      ...manyMessages(4, 3),
      { topic: 'mail.send', aggregateId: 'kunde-ü', payload: { text: 'grüße ✓ 日本語 🎉' } },
    ]);

    const run = await dispatchOnce(['--publisher', receiverUrl], { OUTBOX_WEBHOOK_SECRET: SECRET });

    expect(run.code, run.stderr).toBe(0);
    expect(refused).toEqual([]);
    expect(verified).toHaveLength(13);
    const ids = (
      await db.pool.query<{ message_id: string }>('SELECT message_id FROM outbox_messages')
    ).rows;
    expect(new Set(verified.map((v) => v.id))).toEqual(new Set(ids.map((r) => r.message_id)));
    expect(verified.map((v) => v.envelope)).toContainEqual(
      expect.objectContaining({ payload: { text: 'grüße ✓ 日本語 🎉' } }),
    );
    expect(run.stdout).toMatch(/webhookSigningSecrets=1/);
    expectNoSecret(SECRET, { stdout: run.stdout, stderr: run.stderr });
  });

  it('--webhook-secret-file with the new and the old secret (rotation) verifies where only the old is known', async () => {
    await enqueueCommitted(db.pool, manyMessages(2, 2));
    const file = secretFile(
      `# new, since today\n${secretOf()}\n# old, until every receiver has the new one\n${SECRET}\n`,
    );

    const run = await dispatchOnce(['--publisher', receiverUrl, '--webhook-secret-file', file]);

    expect(run.code, run.stderr).toBe(0);
    expect(refused).toEqual([]);
    expect(verified).toHaveLength(4);
    expect(run.stdout).toMatch(/webhookSigningSecrets=2/);
  });

  it('--config: the secrets sign its http(s) routes too', async () => {
    await enqueueCommitted(db.pool, [
      { topic: 'mail.send', aggregateId: 'c1', payload: 1 },
      { topic: 'payment.charge', aggregateId: 'c2', payload: 2 },
    ]);
    const config = join(mkdtempSync(join(tmpdir(), 'outbox-config-')), 'outbox.json');
    writeFileSync(
      config,
      JSON.stringify({
        routes: [{ pattern: 'mail.*', publisher: receiverUrl }],
        fallback: receiverUrl,
      }),
    );

    const run = await dispatchOnce(['--config', config], { OUTBOX_WEBHOOK_SECRET: SECRET });

    expect(run.code, run.stderr).toBe(0);
    expect(refused).toEqual([]);
    expect(verified).toHaveLength(2);
  });

  it('unsigned requests are refused by the verifying receiver: dead-lettered (401), replayable once signed', async () => {
    await enqueueCommitted(db.pool, manyMessages(1, 1));

    const unsigned = await dispatchOnce(['--publisher', receiverUrl]);

    expect(unsigned.code).toBe(1);
    expect(unsigned.stderr).toMatch(/dead-lettered.*HTTP 401/);
    expect(refused).toEqual(['Missing required headers']);
    expect(verified).toEqual([]);
    expect((await runCli(['replay', '--all-dead', '--database-url', db.url])).code).toBe(0);
    const signed = await dispatchOnce(['--publisher', receiverUrl], {
      OUTBOX_WEBHOOK_SECRET: SECRET,
    });
    expect(signed.code, signed.stderr).toBe(0);
    expect(verified).toHaveLength(1);
  });

  it('a malformed or misplaced secret is a usage error (exit 2) before anything is published', async () => {
    await enqueueCommitted(db.pool, manyMessages(1, 2));
    const raw = randomBytes(32).toString('base64');
    const runs: [string, Promise<CliResult>, RegExp][] = [
      [
        'no whsec_ prefix',
        dispatchOnce(['--publisher', receiverUrl], { OUTBOX_WEBHOOK_SECRET: raw }),
        /OUTBOX_WEBHOOK_SECRET does not start with "whsec_"/,
      ],
      [
        'second of two too short',
        dispatchOnce(['--publisher', receiverUrl], {
          OUTBOX_WEBHOOK_SECRET: `${SECRET} whsec_${raw.slice(0, 12)}`,
        }),
        /OUTBOX_WEBHOOK_SECRET secret 2 of 2 holds a 9-byte key/,
      ],
      [
        'set but empty',
        dispatchOnce(['--publisher', receiverUrl], { OUTBOX_WEBHOOK_SECRET: '' }),
        /is set but empty/,
      ],
      [
        'a bad line in the file',
        dispatchOnce([
          '--publisher',
          receiverUrl,
          '--webhook-secret-file',
          secretFile(`${SECRET}\n${raw}\n`),
        ]),
        /--webhook-secret-file .* line 2 does not start with "whsec_"/,
      ],
      [
        'a missing file',
        dispatchOnce(['--publisher', receiverUrl, '--webhook-secret-file', '/nonexistent/s']),
        /no such file/,
      ],
      [
        'both sources',
        dispatchOnce(['--publisher', receiverUrl, '--webhook-secret-file', secretFile(SECRET)], {
          OUTBOX_WEBHOOK_SECRET: SECRET,
        }),
        /not both/,
      ],
      [
        'a command-line value',
        dispatchOnce(['--publisher', receiverUrl, `--webhook-secret=${raw}`]),
        /never taken as command-line values .* OUTBOX_WEBHOOK_SECRET/,
      ],
    ];
    for (const [what, running, message] of runs) {
      const run = await running;
      expect(run.code, what).toBe(2);
      expect(run.stderr, what).toMatch(message);
      expectNoSecret(`whsec_${raw}`, { [`${what}: output`]: run.stdout + run.stderr });
      expectNoSecret(SECRET, { [`${what}: output`]: run.stdout + run.stderr });
    }
    expect(verified).toEqual([]);
    expect(refused).toEqual([]);
    expect(await backlog()).toBe(2);
  });

  it('--help names the variable and the flag', async () => {
    const help = (await runCli(['dispatch', '--help'])).stdout;
    expect(help).toMatch(/--webhook-secret-file PATH/);
    expect(help).toMatch(/OUTBOX_WEBHOOK_SECRET/);
  });
});

describe('the signing secret never shows', () => {
  let leaky: TestWebhook;
  beforeAll(async () => {
    leaky = await startTestWebhook();
  });
  afterAll(() => leaky.close());

  it('in logs, last_error, outbox status, dead list or the dashboard, even when a receiver echoes it', async () => {
    const secret = secretOf();
    const key = secret.slice('whsec_'.length);
    // The worst receiver: refuses, and prints the secret it expected, whole and bare.
    leaky.onRequest = (_request, response) =>
      response
        .writeHead(401, { 'content-type': 'text/plain' })
        .end(
          `signature mismatch: expected secret ${secret} (key ${key}, ${key.replace(/=+$/, '')})`,
        );
    await enqueueCommitted(db.pool, manyMessages(2, 1));

    const text = await dispatchOnce(['--publisher', `${leaky.baseUrl}/hook`], {
      OUTBOX_WEBHOOK_SECRET: secret,
    });
    expect(text.code).toBe(1);
    expect(text.stderr).toMatch(/dead-lettered.*HTTP 401: signature mismatch/);
    const replay = await runCli(['replay', '--all-dead', '--database-url', db.url]);
    expect(replay.code, replay.stderr).toBe(0);
    const json = await dispatchOnce(['--publisher', `${leaky.baseUrl}/hook`, '--json'], {
      OUTBOX_WEBHOOK_SECRET: secret,
    });
    expect(json.code).toBe(1);

    const lastErrors = (
      await db.pool.query<{ last_error: string }>('SELECT last_error FROM outbox')
    ).rows.map((r) => r.last_error);
    expect(lastErrors).toHaveLength(2);
    for (const error of lastErrors) expect(error).toMatch(/^permanent: HTTP 401: signature/);
    const dashboard = await startDashboard({ executor: fromPg(db.pool), port: 0 });
    let api: string;
    let page: string;
    try {
      await dashboard.sample();
      api = await (await fetch(`${dashboard.url}api/state`)).text();
      page = await (await fetch(dashboard.url)).text();
    } finally {
      await dashboard.close();
    }
    expect(api).toMatch(/HTTP 401: signature mismatch/);
    expectNoSecret(secret, {
      'dispatch stdout': text.stdout,
      'dispatch stderr': text.stderr,
      'dispatch --json stdout': json.stdout,
      'dispatch --json stderr': json.stderr,
      last_error: lastErrors.join('\n'),
      'status --json': (await runCli(['status', '--json', '--database-url', db.url])).stdout,
      status: (await runCli(['status', '--database-url', db.url])).stdout,
      'dead list --json': (await runCli(['dead', 'list', '--json', '--database-url', db.url]))
        .stdout,
      replay: replay.stdout + replay.stderr,
      'dashboard /api/state': api,
      'dashboard page': page,
    });
  });
});
