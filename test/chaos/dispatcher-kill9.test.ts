import { beforeAll, describe, expect, it } from 'vitest';
import { startCli } from '../helpers/cli-process.js';
import type { TestDatabase } from '../helpers/database.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { enqueueCommitted, manyMessages } from '../helpers/outbox-fixtures.js';
import { killNine, useSlowReceiver } from '../helpers/kill9.js';
import type { WebhookReceiver } from '../helpers/webhook-receiver.js';

// Until `harness.fast()`, each delivery takes 300 ms: the first dispatcher is killed mid-batch.
const harness = useSlowReceiver({ slowMs: 300 });
let db: TestDatabase;
let receiver: WebhookReceiver;
beforeAll(() => {
  ({ db, receiver } = harness.current());
});

const LEASE_MS = 4_000;

describe('kill -9 of a dispatcher in the middle of a batch', () => {
  it('its messages are published by another dispatcher after the lease expires; nothing is lost', async () => {
    const written = await enqueueCommitted(db.pool, manyMessages(50, 4));
    const args = [
      'dispatch',
      '--database-url',
      db.url,
      '--publisher',
      receiver.url,
      '--batch-size',
      '50',
      '--lease-ms',
      String(LEASE_MS),
      '--poll-interval-ms',
      '100',
    ];
    const victim = startCli(args);
    // Wait until the victim holds a leased batch and has requests in flight.
    await expect
      .poll(
        async () =>
          (
            await db.pool.query(
              `SELECT count(*)::int AS n FROM outbox WHERE lease_owner IS NOT NULL`,
            )
          ).rows[0].n,
        { timeout: 30_000 },
      )
      .toBeGreaterThan(0);
    const leased = await db.pool.query<{ message_id: string; lease_expires_at: Date }>(
      `SELECT message_id, lease_expires_at FROM outbox WHERE lease_owner IS NOT NULL`,
    );
    await killNine(victim);
    harness.fast();

    const survivor = startCli(args);
    try {
      await expect.poll(() => receiver.distinct(), { timeout: 60_000 }).toBe(200);
    } catch (error) {
      // What the survivor printed is what a failure here needs.
      process.stderr.write(`the survivor said:\n${survivor.output().slice(-4_000)}\n`);
      throw error;
    }
    survivor.child.kill('SIGTERM');
    expect(await survivor.exited).toBe(0);

    const report = checkHistory(expectedOf(written), receiver.events);
    expect(report.lost).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    // The victim's leased messages were taken over only once the lease had expired.
    const { rows } = await db.pool.query<{
      message_id: string;
      attempts: number;
      dispatched_at: Date;
    }>(
      `SELECT message_id, attempts, dispatched_at FROM outbox_messages WHERE message_id = ANY($1)`,
      [leased.rows.map((r) => r.message_id)],
    );
    expect(rows.length).toBe(leased.rows.length);
    const expiry = Math.max(...leased.rows.map((r) => r.lease_expires_at.getTime()));
    for (const row of rows) {
      expect(row.attempts).toBe(2);
      expect(row.dispatched_at.getTime()).toBeGreaterThanOrEqual(expiry - 50);
    }
    const pending = await db.pool.query(
      'SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NULL',
    );
    expect(pending.rows[0].n).toBe(0);
  }, 120_000);
});
