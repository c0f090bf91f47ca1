import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted, manyMessages } from '../../helpers/outbox-fixtures.js';
import { runCli } from '../../helpers/run-cli.js';
import { closedPort } from '../../helpers/services.js';
import { withHostsBefore } from '../../helpers/url.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

/**
 * Every command takes libpq's multi-host URL (issue 44): a host that is down listed first, the
 * real server second, `target_session_attrs=read-write`.
 */
let db: TestDatabase;
let receiver: WebhookReceiver;
let url: string;
beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startWebhookReceiver();
  url = withHostsBefore(db.url, [`127.0.0.1:${await closedPort()}`], 'read-write');
});
afterAll(async () => {
  await receiver?.close();
  await db?.drop();
});

describe('a multi-host --database-url', () => {
  it('dispatch --once publishes through it; status, prune and migrate read it', async () => {
    await enqueueCommitted(db.pool, manyMessages(3, 2));
    const dispatched = await runCli([
      'dispatch',
      '--once',
      '--database-url',
      url,
      '--publisher',
      receiver.url,
    ]);
    expect(dispatched.stderr).toBe('');
    expect(dispatched.code).toBe(0);
    expect(receiver.distinct()).toBe(6);
    const status = await runCli(['status', '--json', '--database-url', url]);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ backlog: 0 });
    const prune = await runCli([
      'prune',
      '--older-than',
      '30d',
      '--dry-run',
      '--database-url',
      url,
    ]);
    expect(prune.code).toBe(0);
    const migrate = await runCli(['migrate', '--database-url', url]);
    expect(migrate.code).toBe(0);
  });

  it('a password in it is masked in what the CLI prints', async () => {
    // No such role: the error names the URL, password masked.
    const withPassword = url.replace(/:\/\/[^@/]*@/, '://someone:s3cret@');
    const result = await runCli(['status', '--database-url', withPassword]);
    expect(result.code).not.toBe(0);
    expect(result.stdout + result.stderr).not.toContain('s3cret');
  });

  it('an unknown target_session_attrs or a bad port is a usage error (exit 2)', async () => {
    const bad = await runCli(['status', '--database-url', url.replace('read-write', 'master')]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/target_session_attrs=master is not one of any, read-write/);
    const port = await runCli(['status', '--database-url', url.replace(/:(\d+),/, ':5x,')]);
    expect(port.code).toBe(2);
    expect(port.stderr).toMatch(/has the port "5x"/);
  });

  it('--mode cdc refuses several hosts and says why (exit 2)', async () => {
    const result = await runCli([
      'dispatch',
      '--mode',
      'cdc',
      '--database-url',
      url,
      '--publisher',
      receiver.url,
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/--mode cdc takes a database URL of one host/);
  });
});
