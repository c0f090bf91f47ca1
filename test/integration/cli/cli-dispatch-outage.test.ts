import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dispatchArgs, startCli, type CliProcess } from '../../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted, manyMessages } from '../../helpers/outbox-fixtures.js';
import { runCli } from '../../helpers/run-cli.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

/**
 * Issue 27 end to end: two `outbox dispatch` processes, an HTTP destination answering 503 for a
 * while and then 200, on a compressed clock (3 attempts, 100-200 ms backoff). Without route
 * pauses every message would be dead-lettered within a second of the outage.
 */
let db: TestDatabase;
let receiver: WebhookReceiver;
let down = true;
let requests = 0;
const dispatchers: CliProcess[] = [];
beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startWebhookReceiver({
    status: () => {
      requests++;
      return down ? 503 : 200;
    },
  });
});
afterAll(async () => {
  for (const d of dispatchers) if (d.child.exitCode === null) d.child.kill('SIGKILL');
  await receiver.close();
  await db.drop();
});

const count = async (sql: string) => (await db.pool.query<{ n: number }>(sql)).rows[0]!.n;

describe('an outage through outbox dispatch (issue 27)', () => {
  it('pauses the route for both dispatchers: 0 dead letters, all delivered after it', async () => {
    const total = 300;
    await enqueueCommitted(db.pool, manyMessages(100, 3));
    const args = dispatchArgs(
      db.url,
      receiver.url,
      '--batch-size',
      '50',
      '--max-attempts',
      '3',
      '--backoff-base-ms',
      '100',
      '--backoff-max-ms',
      '200',
      '--backoff-jitter-ms',
      '0',
      '--route-pause-max-ms',
      '1000',
    );
    dispatchers.push(startCli(args), startCli(args));
    await expect
      .poll(() => count('SELECT count(*)::int AS n FROM outbox_route_pauses'), { timeout: 30_000 })
      .toBe(1);
    const status = JSON.parse(
      (await runCli(['status', '--json', '--database-url', db.url])).stdout,
    );
    expect(status.pausedRoutes).toEqual([
      expect.objectContaining({ route: '*', reason: expect.stringMatching(/503/) }),
    ]);
    const atPause = requests;
    // Ten attempt budgets of this clock (3 attempts × ~200 ms) and more.
    await new Promise((resolve) => setTimeout(resolve, 6_000));
    const whilePaused = requests - atPause;
    expect(
      await count('SELECT count(*)::int AS n FROM outbox WHERE dead_lettered_at IS NOT NULL'),
    ).toBe(0);
    down = false;
    await expect.poll(() => receiver.distinct(), { timeout: 60_000 }).toBe(total);
    expect(
      await count('SELECT count(*)::int AS n FROM outbox WHERE dead_lettered_at IS NOT NULL'),
    ).toBe(0);
    expect(await count('SELECT count(*)::int AS n FROM outbox_route_pauses')).toBe(0);
    // Paused: a batch the other dispatcher had claimed before the pause, then one probe at a
    // time (about one a second). Hammering would be every pending message per backoff.
    expect(whilePaused).toBeLessThan(2 * 50 + 20);
    for (const d of dispatchers) d.child.kill('SIGTERM');
    for (const d of dispatchers) expect(await d.exited).toBe(0);
    expect(dispatchers[0]!.output() + dispatchers[1]!.output()).toMatch(/route paused/);
  }, 120_000);
});
