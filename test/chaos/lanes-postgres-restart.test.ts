import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOutbox, fromPg, migrate, type EnqueuedMessage } from '../../src/index.js';
import { startCli, type CliProcess } from '../helpers/cli-process.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { laneDispatchArgs, lanesPending } from '../helpers/lanes.js';
import { manyMessages } from '../helpers/outbox-fixtures.js';
import { startEmbeddedPostgres, type EmbeddedServer } from '../helpers/postgres-server.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

/**
 * `outbox dispatch --engine lanes` across a Postgres restart and a kill -9, in separate
 * processes, as test/chaos/dispatcher-postgres-restart.test.ts runs the claim engine: delivering
 * to an HTTP sink while a writer commits; Postgres is restarted (every connection dies; the
 * cursors, leases and the id sequence come back from disk), then the dispatcher is killed with
 * SIGKILL mid-run (it runs two lane dispatchers, `--concurrency 2`) and a second one takes its
 * lanes once their leases expire. The history
 * checker: nothing lost, nothing out of order per aggregate, nothing in flight twice at once.
 */
let server: EmbeddedServer;
beforeAll(async () => {
  server = await startEmbeddedPostgres({ restartable: true });
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  await migrate(fromPg(client));
  await client.end();
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

describe('lanes dispatcher across a Postgres restart and a kill -9', () => {
  it('publishes every message, in order per aggregate, and leaves nothing pending', async () => {
    const receiver: WebhookReceiver = await startWebhookReceiver({ holdMs: () => 5 });
    const pool = new pg.Pool({ connectionString: server.url, max: 2 });
    pool.on('error', () => undefined);
    const outbox = createOutbox({ engine: 'lanes' });
    const written: EnqueuedMessage[] = [];
    let retried = 0;
    const write = async (round: number) => {
      for (;;) {
        const client = await pool.connect().catch(() => null);
        if (client) {
          try {
            await client.query('BEGIN');
            const batch = manyMessages(10, 2).map((m) => ({
              ...m,
              payload: { round, m: m.payload },
            }));
            const result = await outbox.enqueue(fromPg(client), batch);
            await client.query('COMMIT');
            written.push(...result);
            return;
          } catch {
            // The restart killed this transaction: nothing of it was written. Write it again.
            retried++;
          } finally {
            client.release(true);
          }
        }
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    };
    const args = (path: string, ...extra: string[]) =>
      laneDispatchArgs(
        server.url,
        receiver.url.replace(/\/hook$/, path),
        '--batch-size',
        '25',
        '--lease-ms',
        '3000',
        '--poll-interval-ms',
        '100',
        ...extra,
      );
    const got = () => receiver.distinct();
    const processes: CliProcess[] = [];
    // The first runs two lane dispatchers (--concurrency 2): both die with the kill -9.
    const first = startCli(args('/first', '--concurrency', '2'));
    processes.push(first);
    let restartedAt = 0;
    let killedAt = 0;
    let killTime = 0;
    try {
      for (let round = 0; round < 10; round++) await write(round);
      await expect.poll(got, { timeout: 30_000 }).toBeGreaterThan(0);
      await server.restart();
      restartedAt = got();
      for (let round = 10; round < 20; round++) await write(round);
      await expect.poll(got, { timeout: 60_000 }).toBeGreaterThan(300);
      killTime = performance.now();
      first.child.kill('SIGKILL');
      expect(await first.exited).toBe('SIGKILL');
      killedAt = got();
      for (let round = 20; round < 30; round++) await write(round);
      const second = startCli(args('/second'));
      processes.push(second);
      try {
        await expect.poll(got, { timeout: 60_000 }).toBe(written.length);
      } catch (error) {
        process.stderr.write(`second dispatcher:\n${second.output().slice(-3_000)}\n`);
        throw error;
      }
      await expect.poll(() => lanesPending(pool), { timeout: 30_000 }).toBe(0);
      second.child.kill('SIGTERM');
      expect(await second.exited).toBe(0);
    } finally {
      for (const p of processes) {
        if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
        await p.exited;
      }
    }
    await receiver.close();
    const report = checkHistory(expectedOf(written), receiver.events);
    // What a kill -9 publishes again: what was consumed since the last cursor write, which a
    // busy dispatcher makes once a second (docs/lanes.md): at most the first dispatcher's
    // deliveries of its last 2 s.
    const lastSeconds = receiver.events.filter(
      (e) => e.via === '/first' && e.start > killTime - 2_000,
    ).length;
    console.log(
      `[lanes postgres restart] messages ${written.length}, delivered ${got()} ` +
        `(${receiver.events.length} deliveries, ${report.duplicates} duplicates); lost ` +
        `${report.lost.length}, out of order ${report.orderViolations.length}, concurrent ` +
        `duplicates ${report.concurrentDuplicates.length}; restart at ${restartedAt} delivered, ` +
        `kill -9 at ${killedAt}, the first's deliveries in its last 2 s ${lastSeconds}; writer transactions retried ${retried}; first dispatcher's ` +
        `claim failures logged ${(first.output().match(/claim failed/g) ?? []).length}`,
    );
    expect(written.length).toBe(600);
    expect(report.lost).toEqual([]);
    expect(report.unexpected).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    expect(report.duplicates).toBeLessThanOrEqual(lastSeconds);
    await pool.end();
  }, 120_000);
});
