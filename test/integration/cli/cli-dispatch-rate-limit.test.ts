import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dispatchArgs, startCli, type CliProcess } from '../../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted, manyMessages } from '../../helpers/outbox-fixtures.js';
import { runCli } from '../../helpers/run-cli.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

/** Issue 27: one rate limit for two `outbox dispatch` processes, declared by each of them. */
let db: TestDatabase;
let receiver: WebhookReceiver;
const dispatchers: CliProcess[] = [];
beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startWebhookReceiver();
});
afterAll(async () => {
  for (const d of dispatchers) if (d.child.exitCode === null) d.child.kill('SIGKILL');
  await receiver.close();
  await db.drop();
});

describe('--rate-limit across dispatchers (issue 27)', () => {
  it('two processes share one bucket: no second carries more than the limit plus its burst', async () => {
    const total = 120;
    await enqueueCommitted(db.pool, manyMessages(20, 6));
    await enqueueCommitted(db.pool, manyMessages(10, 1, 'mail.send'));
    const args = dispatchArgs(db.url, receiver.url, '--rate-limit', 'payment.*=20/s:5');
    dispatchers.push(startCli(args), startCli(args));
    await expect.poll(() => receiver.distinct(), { timeout: 60_000 }).toBe(total + 10);
    for (const d of dispatchers) d.child.kill('SIGTERM');
    for (const d of dispatchers) expect(await d.exited).toBe(0);

    const payments = receiver.envelopes
      .map((e, i) => ({ e, at: receiver.events[i]!.end }))
      .filter(({ e }) => e.topic === 'payment.charge');
    // Per sliding second: at most 20 plus the burst of 5 (and a token's worth of rounding).
    let most = 0;
    for (let i = 0, j = 0; i < payments.length; i++) {
      while (payments[i]!.at - payments[j]!.at >= 1000) j++;
      most = Math.max(most, i - j + 1);
    }
    expect(most).toBeLessThanOrEqual(26);
    // Per-aggregate order held while messages waited for tokens.
    const last = new Map<string, number>();
    for (const { e } of payments) {
      expect(e.sequence).toBeGreaterThan(last.get(e.aggregateId) ?? 0);
      last.set(e.aggregateId, e.sequence);
    }
    const { rows } = await db.pool.query(
      'SELECT max(attempts)::int AS attempts, count(*) FILTER (WHERE dead_lettered_at IS NOT NULL)::int AS dead FROM outbox_messages',
    );
    expect(rows[0]).toEqual({ attempts: 1, dead: 0 });

    const limits = await runCli(['limits', '--json', '--database-url', db.url]);
    expect(limits.code, limits.stderr).toBe(0);
    expect(JSON.parse(limits.stdout).rateLimits).toEqual([
      expect.objectContaining({ pattern: 'payment.*', perSecond: 20, burst: 5, taken: total }),
    ]);
    const human = await runCli(['limits', '--database-url', db.url]);
    expect(human.stdout).toMatch(/payment\.\*\s+20\/s\s+5/);
  }, 120_000);

  it('a malformed --rate-limit is a usage error naming the expected form', async () => {
    const run = await runCli([
      'dispatch',
      '--once',
      '--database-url',
      db.url,
      '--publisher',
      receiver.url,
      '--rate-limit',
      'payment.*=fast',
    ]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/PATTERN=N\/s/);
  });
});
