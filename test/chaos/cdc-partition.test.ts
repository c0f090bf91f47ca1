import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg, migrate } from '../../src/index.js';
import { startCli, type CliProcess } from '../helpers/cli-process.js';
import { startFreezeProxy, type FreezeProxy } from '../helpers/freeze-proxy.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { enqueueCommitted, manyMessages } from '../helpers/outbox-fixtures.js';
import { startEmbeddedPostgres, type EmbeddedServer } from '../helpers/postgres-server.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

/**
 * partition.test.ts for `outbox dispatch --mode cdc`: the replication connection, the pool and
 * the sweeper all go through the freezing proxy. The sweeper polls every 10 minutes here, so what
 * is published after the heal is published because the stream came back.
 *
 * A private server (logical decoding, and `wal_sender_timeout` lowered to 5 s): the walsender of
 * the frozen stream keeps the slot active until that timeout, and a new stream cannot attach to
 * an active slot. On a stock server (60 s) the new stream retries that long, and the sweeper
 * covers the gap (docs/failure-handling.md).
 */
let server: EmbeddedServer;
let pool: pg.Pool;
let receiver: WebhookReceiver;
let proxy: FreezeProxy;
let dispatcher: CliProcess | undefined;
beforeAll(async () => {
  server = await startEmbeddedPostgres({
    flags: [
      '-c',
      'max_wal_senders=4',
      '-c',
      'max_replication_slots=4',
      '-c',
      'wal_sender_timeout=5s',
    ],
  });
  pool = new pg.Pool({ connectionString: server.url, max: 4 });
  pool.on('error', () => undefined);
  const client = await pool.connect();
  try {
    await migrate(fromPg(client), { engine: 'claims' });
  } finally {
    client.release();
  }
  receiver = await startWebhookReceiver();
  proxy = await startFreezeProxy(Number(new URL(server.url).port));
}, 120_000);
afterAll(async () => {
  try {
    if (dispatcher) {
      dispatcher.child.kill('SIGKILL');
      await dispatcher.exited;
    }
    await proxy?.close();
    await receiver?.close();
    await pool?.end();
  } finally {
    await server?.stop();
  }
});

describe('network partition of a CDC dispatcher (connections frozen, not reset)', () => {
  it('the stream is noticed dead, reopened after the heal, and publishes again; nothing lost', async () => {
    dispatcher = startCli([
      'dispatch',
      '--mode',
      'cdc',
      '--database-url',
      proxy.url(server.url),
      '--publisher',
      receiver.url,
      '--sweep-interval-ms',
      '600000',
      '--lease-ms',
      '10000',
    ]);
    await expect.poll(() => dispatcher!.output(), { timeout: 30_000 }).toContain('CDC streaming');
    const written = await enqueueCommitted(pool, manyMessages(5, 2));
    await expect.poll(() => receiver.distinct(), { timeout: 30_000 }).toBe(10);

    proxy.freeze();
    written.push(...(await enqueueCommitted(pool, manyMessages(5, 2, 'mail.send'))));
    await new Promise((resolve) => setTimeout(resolve, 15_000));
    const receivedAtHeal = receiver.events.length;
    proxy.heal();
    const healedAt = performance.now();
    written.push(...(await enqueueCommitted(pool, manyMessages(5, 2, 'sms.send'))));

    await expect.poll(() => receiver.distinct(), { timeout: 30_000, interval: 50 }).toBe(30);
    const resumedInMs = Math.round(receiver.events[receivedAtHeal]!.start - healedAt);
    const report = checkHistory(expectedOf(written), receiver.events);
    expect(report.lost).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    // As in partition.test.ts: a message goes out again only after a lease expiry, which counts.
    const { rows } = await pool.query<{ extra: number }>(
      `SELECT coalesce(sum(attempts - 1), 0)::int AS extra FROM outbox_messages`,
    );
    expect(report.duplicates).toBeLessThanOrEqual(rows[0]!.extra);
    expect(dispatcher.output()).toContain('CDC stream lost');
    // What went out after the heal may have been claimed by the worker's retried cycles before
    // the stream itself was back (its connect attempt into the partition times out first).
    await expect
      .poll(() => dispatcher!.output(), { timeout: 30_000 })
      .toMatch(/CDC streaming.*reconnect=true/);

    // A graceful stop after the partition: the pool holds connections the partition froze,
    // ended by its idle timeout and still waiting for a FIN the proxy dropped. The process must
    // exit by itself, exit code 0 (cli/dispatch/pool-shutdown.ts destroys what does not close).
    const stopAt = performance.now();
    dispatcher.child.kill('SIGTERM');
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
      `[cdc-partition] first delivery ${resumedInMs} ms after the heal; duplicates ${report.duplicates}; ` +
        `SIGTERM after the heal: exited (code 0) after ${exitedInMs} ms`,
    );
  }, 180_000);
});
