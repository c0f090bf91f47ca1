import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOutbox, fromPg, migrate, type EnqueuedMessage } from '../../src/index.js';
import { startCli } from '../helpers/cli-process.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { manyMessages } from '../helpers/outbox-fixtures.js';
import { startEmbeddedPostgres, type EmbeddedServer } from '../helpers/postgres-server.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

/**
 * The polling dispatcher with the lane floor of migration 012 (issue 25) across a Postgres
 * restart and a kill -9, in separate processes: `outbox dispatch` delivering to an HTTP sink
 * while a writer commits; Postgres is restarted (every connection dies; the floor's sequences
 * come back from the WAL), the first dispatcher is killed with SIGKILL mid-run and a second one
 * takes over. The history checker: nothing lost, nothing out of order per aggregate, nothing in
 * flight from two dispatchers at once.
 */
let server: EmbeddedServer;
beforeAll(async () => {
  server = await startEmbeddedPostgres({ restartable: true });
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  await migrate(fromPg(client), { engine: 'claims' });
  await client.end();
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

describe('polling dispatcher across a Postgres restart and a kill -9', () => {
  // `auto` claims heads first behind this sink (its calls take ~2 ms); `runs-first` takes a few
  // aggregates' runs per claim (migration 019) through the same faults.
  it.each(['auto', 'runs-first'])(
    'publishes every message once in order per aggregate, and leaves nothing pending (--claim-shape %s)',
    async (shape) => {
      const receiver: WebhookReceiver = await startWebhookReceiver({ holdMs: () => 2 });
      const pool = new pg.Pool({ connectionString: server.url, max: 2 });
      pool.on('error', () => undefined);
      const outbox = createOutbox();
      const written: EnqueuedMessage[] = [];
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
            } finally {
              client.release(true);
            }
          }
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      };
      const args = [
        'dispatch',
        '--database-url',
        server.url,
        '--publisher',
        receiver.url,
        '--batch-size',
        '25',
        '--lease-ms',
        '3000',
        '--poll-interval-ms',
        '100',
        '--claim-shape',
        shape,
      ];
      const got = () => new Set(receiver.events.map((e) => e.messageId)).size;
      const first = startCli(args);
      try {
        for (let round = 0; round < 10; round++) await write(round);
        await expect.poll(got, { timeout: 30_000 }).toBeGreaterThan(0);
        await server.restart();
        for (let round = 10; round < 20; round++) await write(round);
        await expect.poll(got, { timeout: 60_000 }).toBeGreaterThan(200);
        first.child.kill('SIGKILL');
        expect(await first.exited).toBe('SIGKILL');
        for (let round = 20; round < 30; round++) await write(round);
        const second = startCli(args);
        try {
          await expect.poll(got, { timeout: 60_000 }).toBe(written.length);
        } catch (error) {
          process.stderr.write(`second dispatcher:\n${second.output().slice(-3_000)}\n`);
          throw error;
        } finally {
          second.child.kill('SIGTERM');
          await second.exited;
        }
      } finally {
        first.child.kill('SIGKILL');
        await first.exited;
      }
      await receiver.close();
      expect(written.length).toBe(600);
      const report = checkHistory(expectedOf(written), receiver.events);
      expect(report.lost).toEqual([]);
      expect(report.orderViolations).toEqual([]);
      expect(report.concurrentDuplicates).toEqual([]);
      const pending = await pool.query(
        'SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NULL',
      );
      expect(pending.rows[0].n).toBe(0);
      await pool.end();
    },
    240_000,
  );
});
