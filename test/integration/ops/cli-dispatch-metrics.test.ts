import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dispatchHelp } from '../../../src/cli/commands/dispatch.js';
import { startCli, type CliProcess } from '../../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted } from '../../helpers/outbox-fixtures.js';
import { eventually, freePort } from '../../fixtures/ops/tools.js';

// Runs once `outbox dispatch --metrics-port` / `--prune-older-than` are wired into dispatch.ts
// (see the issue 8 report); until then it is skipped with a printed reason.
const wired =
  dispatchHelp.includes('--metrics-port') && dispatchHelp.includes('--prune-older-than');

describe('outbox dispatch --metrics-port --prune-older-than', () => {
  let db: TestDatabase;
  let cli: CliProcess | undefined;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    if (cli && cli.child.exitCode === null) {
      cli.child.kill('SIGKILL');
      await cli.exited;
    }
    await db.drop();
  });

  it('serves /metrics and /healthz on 127.0.0.1 and prunes old rows on schedule', async ({
    skip,
  }) => {
    if (!wired) {
      console.warn('[skipped] dispatch.ts does not have --metrics-port/--prune-older-than yet');
      skip();
    }
    await enqueueCommitted(db.pool, [
      { topic: 'mail.send', aggregateId: 'm1', payload: {} },
      { topic: 'mail.send', aggregateId: 'm2', payload: {} },
    ]);
    await db.pool.query(`
      INSERT INTO outbox (aggregate_id, topic, payload, dispatched_at)
      SELECT 'old' || g, 'mail.send', '{}', now() - interval '40 days' FROM generate_series(1, 30) g`);
    const port = await freePort();
    cli = startCli(
      [
        'dispatch',
        '--publisher',
        'memory://',
        '--poll-interval-ms',
        '100',
        '--metrics-port',
        String(port),
        '--prune-older-than',
        '30d',
      ],
      { DATABASE_URL: db.url },
    );
    const text = await eventually('two published messages in /metrics', async () => {
      const body = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      return /^outbox_messages_published_total\{topic="mail.send"\} 2$/m.test(body)
        ? body
        : undefined;
    });
    expect(text).toContain('# TYPE outbox_pending_messages gauge');
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
    await eventually('old rows pruned', async () => {
      const { rows } = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM outbox WHERE dispatched_at < now() - interval '30 days'`,
      );
      return rows[0]!.n === 0 ? true : undefined;
    });
    cli.child.kill('SIGTERM');
    expect(await cli.exited).toBe(0);
    expect(cli.output()).toMatch(/retention run removed=30/);
  });

  it('--metrics-port is refused when not a port number (exit 2)', async ({ skip }) => {
    if (!wired) skip();
    const bad = startCli(['dispatch', '--publisher', 'memory://', '--metrics-port', 'x'], {
      DATABASE_URL: db.url,
    });
    expect(await bad.exited).toBe(2);
  });
});
