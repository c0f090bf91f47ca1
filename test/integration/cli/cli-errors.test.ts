import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { runCli } from '../../helpers/run-cli.js';

/**
 * The CLI's first errors say what to do (issue 26): an unmigrated database, a refused
 * connection, a malformed URL, a scheme typo, a misspelt flag, an unknown publisher scheme.
 */

let empty: TestDatabase;
beforeAll(async () => {
  empty = await createTestDatabase({ migrated: false });
});
afterAll(() => empty?.drop());

/** A local port with nothing listening on it (bound, then closed). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe('outbox CLI errors', () => {
  it('status on an unmigrated database says to run outbox migrate (exit 1)', async () => {
    const result = await runCli(['status', '--database-url', empty.url]);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/outbox tables are not there/);
    expect(result.stderr).toMatch(/Run `outbox migrate`/);
    expect(result.stderr).not.toMatch(
      /^outbox status: relation "public\.outbox" does not exist\n$/,
    );
  });

  it('dead list on an unmigrated database says the same', async () => {
    const result = await runCli(['dead', 'list', '--database-url', empty.url]);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/outbox migrate/);
  });

  it('a refused connection names the URL, password masked, and what to check', async () => {
    const port = await closedPort();
    const result = await runCli([
      'status',
      '--database-url',
      `postgres://app:s3cret@127.0.0.1:${port}/app`,
    ]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`postgres://app:***@127.0.0.1:${port}/app`);
    expect(result.stderr).toMatch(/connection refused.*PostgreSQL is running/);
    expect(result.stderr).not.toContain('s3cret');
  });

  it("a malformed URL ('not a url') is a usage error before connecting (exit 2)", async () => {
    const result = await runCli(['status', '--database-url', 'not a url']);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/"not a url" is not a URL: expected postgres:\/\//);
    expect(result.stderr).not.toMatch(/ENOTFOUND/);
  });

  it('a postgress:// typo is a usage error naming the scheme, password masked (exit 2)', async () => {
    const result = await runCli(['migrate', '--database-url', 'postgress://u:pw@db/app']);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/"postgress:\/\/" \(a typo\?\).*postgres:\/\//);
    expect(result.stderr).not.toContain(':pw@');
  });

  it('DATABASE_URL is checked the same way, and named', async () => {
    // mysql:// is a store of its own now (docs/mysql.md): another scheme no store takes.
    const result = await runCli(['status'], { env: { DATABASE_URL: 'mssql://db/app' } });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/DATABASE_URL .*"mssql:\/\/"/);
  });

  it('--batchsize suggests --batch-size (exit 2)', async () => {
    const result = await runCli([
      'dispatch',
      '--database-url',
      empty.url,
      '--publisher',
      'memory://',
      '--batchsize',
      '10',
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/unknown option --batchsize \(did you mean --batch-size\?\)/);
  });

  it('an unknown --publisher scheme is a wrong command line (exit 2), as the help says', async () => {
    const result = await runCli([
      'dispatch',
      '--database-url',
      empty.url,
      '--publisher',
      'ftp://example.com/outbox',
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/scheme "ftp:\/\/" is not supported: use one of http:\/\//);
  });
});
