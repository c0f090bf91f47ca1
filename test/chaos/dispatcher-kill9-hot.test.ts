import { beforeAll, describe, expect, it } from 'vitest';
import { startCli } from '../helpers/cli-process.js';
import type { TestDatabase } from '../helpers/database.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { enqueueCommitted, manyMessages } from '../helpers/outbox-fixtures.js';
import { killNine, useSlowReceiver } from '../helpers/kill9.js';
import type { WebhookReceiver } from '../helpers/webhook-receiver.js';

/**
 * Issue 16: kill -9 of a dispatcher in the middle of an ordered run. Three hot aggregates of 150
 * messages each; the victim's claim takes their heads and a run of 9 behind each, and publishes
 * them round by round (one message per aggregate at a time), slowly. It dies with part of each
 * run delivered, the rest leased and untried. Nothing may overtake the leased runs before the
 * lease expires, and after it the survivor delivers every message, each aggregate in order.
 */
// Until `harness.fast()`, every delivery takes 150 ms: a run of 10 takes 1.5 s to go out.
const harness = useSlowReceiver({ slowMs: 150 });
let db: TestDatabase;
let receiver: WebhookReceiver;
beforeAll(() => {
  ({ db, receiver } = harness.current());
});

const LEASE_MS = 4_000;
const AGGREGATES = 3;
const PER_AGGREGATE = 150;

describe('kill -9 of a dispatcher in the middle of ordered runs', () => {
  it('the survivor takes the runs over only after the lease expires and delivers every message, in order', async () => {
    const written = await enqueueCommitted(db.pool, manyMessages(AGGREGATES, PER_AGGREGATE));
    const args = (batchSize: number) => [
      'dispatch',
      '--database-url',
      db.url,
      '--publisher',
      receiver.url,
      '--batch-size',
      String(batchSize),
      '--lease-ms',
      String(LEASE_MS),
      '--poll-interval-ms',
      '100',
    ];
    const victim = startCli(args(30));
    // Mid-run: the first round (the three heads) was delivered, the runs behind them are leased.
    await expect
      .poll(() => receiver.distinct(), { timeout: 30_000, interval: 20 })
      .toBeGreaterThan(AGGREGATES);
    const leased = await db.pool.query<{
      message_id: string;
      aggregate_id: string;
      lease_expires_at: Date;
    }>(
      `SELECT message_id, aggregate_id, lease_expires_at FROM outbox
       WHERE lease_owner IS NOT NULL AND dispatched_at IS NULL`,
    );
    await killNine(victim);
    // Requests in flight at the kill still reach the receiver: count them as delivered.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const deliveredAtDeath = receiver.distinct();
    // It died holding runs: several leased messages of one aggregate, most not delivered yet.
    const perAggregate = new Map<string, number>();
    for (const row of leased.rows)
      perAggregate.set(row.aggregate_id, (perAggregate.get(row.aggregate_id) ?? 0) + 1);
    expect(Math.max(...perAggregate.values())).toBeGreaterThan(1);
    expect(deliveredAtDeath).toBeLessThan(leased.rows.length);
    harness.fast();

    const survivor = startCli(args(50));
    await expect
      .poll(() => receiver.distinct(), { timeout: 60_000, interval: 100 })
      .toBe(AGGREGATES * PER_AGGREGATE);
    survivor.child.kill('SIGTERM');
    expect(await survivor.exited).toBe(0);

    const report = checkHistory(expectedOf(written), receiver.events);
    expect(report.lost).toEqual([]);
    expect(report.unexpected).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    // The runs were taken over only once the lease had expired, each message of them (delivered
    // by the victim or not) claimed a second time.
    const expiry = Math.max(...leased.rows.map((r) => r.lease_expires_at.getTime()));
    const { rows } = await db.pool.query<{ attempts: number; dispatched_at: Date }>(
      `SELECT attempts, dispatched_at FROM outbox_messages WHERE message_id = ANY($1)`,
      [leased.rows.map((r) => r.message_id)],
    );
    expect(rows).toHaveLength(leased.rows.length);
    for (const row of rows) {
      expect(row.attempts).toBe(2);
      expect(row.dispatched_at.getTime()).toBeGreaterThanOrEqual(expiry - 50);
    }
    // Re-deliveries are only of what the victim had sent: at least once, never more.
    expect(report.duplicates).toBeLessThanOrEqual(deliveredAtDeath);
    const pending = await db.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NULL',
    );
    expect(pending.rows[0]!.n).toBe(0);
  }, 120_000);
});
