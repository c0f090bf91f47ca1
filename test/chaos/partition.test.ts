import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, type CliProcess } from '../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { startFreezeProxy, type FreezeProxy } from '../helpers/freeze-proxy.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { enqueueCommitted, manyMessages } from '../helpers/outbox-fixtures.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

/**
 * A network partition between `outbox dispatch` and Postgres: every connection of the dispatcher
 * process (its pool, its LISTEN connection) goes through a proxy that freezes them — bytes
 * dropped, nothing closed — for 15 s, then lets new connections through while the frozen ones
 * stay dead. Writers reach Postgres directly, as an application on the other side of the
 * partition would. Nothing in the dispatcher is told: it has to notice by itself.
 */
let db: TestDatabase;
let receiver: WebhookReceiver;
let proxy: FreezeProxy;
let dispatcher: CliProcess | undefined;
/** While set, each delivery is held this long: the freeze lands in the middle of a batch. */
let holdMs = 0;
beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startWebhookReceiver({ holdMs: () => holdMs });
  proxy = await startFreezeProxy(Number(new URL(db.url).port || 5432));
});
afterAll(async () => {
  if (dispatcher) {
    dispatcher.child.kill('SIGKILL');
    await dispatcher.exited;
  }
  await proxy?.close();
  await receiver?.close();
  await db?.drop();
});

const FREEZE_MS = 15_000;
const LEASE_MS = 10_000;

describe('network partition (connections frozen, not reset)', () => {
  it('outbox dispatch resumes after the heal: nothing lost, no duplicate beyond a lease expiry', async () => {
    dispatcher = startCli([
      'dispatch',
      '--database-url',
      proxy.url(db.url),
      '--publisher',
      receiver.url,
      '--lease-ms',
      String(LEASE_MS),
      '--batch-size',
      '10',
    ]);
    const written = await enqueueCommitted(db.pool, manyMessages(5, 4));
    await expect.poll(() => receiver.distinct(), { timeout: 30_000 }).toBe(20);

    // A batch in flight when the partition starts: its settle cannot go through.
    holdMs = 100;
    written.push(...(await enqueueCommitted(db.pool, manyMessages(5, 4, 'payment.refund'))));
    await expect.poll(() => receiver.distinct(), { timeout: 30_000 }).toBeGreaterThan(20);
    proxy.freeze();
    holdMs = 0;
    // Written during the partition, and (below) after it.
    written.push(...(await enqueueCommitted(db.pool, manyMessages(5, 2, 'mail.send'))));
    await new Promise((resolve) => setTimeout(resolve, FREEZE_MS));
    const frozenAtHeal = proxy.counts().frozen;
    const receivedAtHeal = receiver.events.length;
    proxy.heal();
    const healedAt = performance.now();
    written.push(...(await enqueueCommitted(db.pool, manyMessages(5, 2, 'sms.send'))));

    // The bound: dispatch resumes within 30 s of the heal.
    await expect.poll(() => receiver.distinct(), { timeout: 30_000, interval: 50 }).toBe(60);
    const firstAfterHeal = receiver.events.slice(receivedAtHeal)[0]!;
    const resumedInMs = Math.round(firstAfterHeal.start - healedAt);
    const allInMs = Math.round(performance.now() - healedAt);

    const report = checkHistory(expectedOf(written), receiver.events);
    expect(report.lost).toEqual([]);
    expect(report.unexpected).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    // A duplicate needs a second claim, and a second claim counts an attempt: a message can be
    // published at most `attempts` times (its lease expired each time before it was settled).
    const { rows } = await db.pool.query<{ extra: number; pending: number }>(
      `SELECT coalesce(sum(attempts - 1), 0)::int AS extra,
              count(*) FILTER (WHERE dispatched_at IS NULL)::int AS pending
       FROM outbox_messages`,
    );
    expect(report.duplicates).toBeLessThanOrEqual(rows[0]!.extra);
    await expect
      .poll(
        async () =>
          (
            await db.pool.query<{ n: number }>(
              `SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NULL`,
            )
          ).rows[0]!.n,
        { timeout: 30_000 },
      )
      .toBe(0);

    // A graceful stop during a second partition, a batch in flight: the settle cannot go
    // through, the pool holds connections that froze (and some the first partition froze,
    // ended by its idle timeout and still waiting for a FIN the proxy dropped). The process must
    // exit by itself, exit code 0: stop bounded by the lease (the settle is retried while it
    // lasts), the pool's frozen connections destroyed after a grace (cli/dispatch/pool-shutdown.ts).
    holdMs = 100;
    const beforeSecond = receiver.events.length;
    await enqueueCommitted(db.pool, manyMessages(5, 2, 'push.send'));
    await expect
      .poll(() => receiver.events.length, { timeout: 30_000 })
      .toBeGreaterThan(beforeSecond);
    proxy.freeze();
    holdMs = 0;
    const stopAt = performance.now();
    dispatcher.child.kill('SIGTERM');
    // The bound for a stop: lease + connect and statement timeouts + the pool's grace,
    // with a wide margin for a loaded machine; a process that lingers fails here.
    const exit = await Promise.race([
      dispatcher.exited,
      new Promise((resolve) => setTimeout(() => resolve('lingering'), 60_000)),
    ]);
    const exitedInMs = Math.round(performance.now() - stopAt);
    if (exit === 'lingering') dispatcher.child.kill('SIGKILL');
    expect(exit, dispatcher.output().slice(-2_000)).toBe(0);
    expect(dispatcher.output()).toMatch(/\bstopped\b/);
    dispatcher = undefined;
    console.log(
      `[partition] frozen connections ${frozenAtHeal}; first delivery ${resumedInMs} ms after ` +
        `the heal, all ${allInMs} ms; duplicates ${report.duplicates} (bound ${rows[0]!.extra}); ` +
        `SIGTERM during a second partition: exited (code 0) after ${exitedInMs} ms`,
    );
  }, 240_000);
});
