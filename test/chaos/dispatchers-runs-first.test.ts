import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, dispatchArgs, type CliProcess } from '../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { enqueueCommitted, manyMessages, resetOutbox } from '../helpers/outbox-fixtures.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

/**
 * The runs-first claim (migration 019) under the faults the heads-first claim is tested with:
 * four `outbox dispatch` processes taking runs of the same chains, one of them killed -9 in the
 * middle of its batches, the others finishing. The history checker reads what the receiver saw:
 * nothing lost, no message in flight twice at once, per-aggregate order held (a run claimed by
 * the victim and taken over after its lease must not be overtaken by the run behind it).
 */
let db: TestDatabase;
let receiver: WebhookReceiver;
beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startWebhookReceiver({ holdMs: () => Math.random() * 2 });
});
afterAll(async () => {
  await receiver.close();
  await db.drop();
});

describe('four dispatchers taking runs first, one killed -9', () => {
  it('200 aggregates 30 deep: none lost, none in flight twice, order held', async () => {
    const written = await enqueueCommitted(db.pool, manyMessages(200, 30));
    const args = dispatchArgs(
      db.url,
      receiver.url,
      '--claim-shape',
      'runs-first',
      '--batch-size',
      '100',
      '--lease-ms',
      '3000',
    );
    const dispatchers: CliProcess[] = Array.from({ length: 4 }, () => startCli(args));
    try {
      // What the claims took, sampled from their leases until the kill: a claim of runs holds
      // at most five aggregates (five heads of a batch of 100, each with its run); heads first
      // holds as many as it finds free — a hundred at the start, and the check below fails.
      const widest: number[] = [];
      const sampling = (async () => {
        while (receiver.distinct() <= 500) {
          const { rows } = await db.pool.query<{ a: number }>(
            `SELECT count(DISTINCT aggregate_id)::int AS a FROM outbox
             WHERE lease_owner IS NOT NULL GROUP BY lease_owner HAVING count(*) >= 50`,
          );
          widest.push(...rows.map((r) => r.a));
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      })();
      await expect.poll(() => receiver.distinct(), { timeout: 60_000 }).toBeGreaterThan(500);
      await sampling;
      expect(widest.length).toBeGreaterThan(0);
      expect(Math.max(...widest)).toBeLessThanOrEqual(5);
      const victim = dispatchers[0]!;
      victim.child.kill('SIGKILL');
      expect(await victim.exited).toBe('SIGKILL');
      await expect
        .poll(() => receiver.distinct(), { timeout: 180_000, interval: 500 })
        .toBe(written.length);
    } catch (error) {
      process.stderr.write(dispatchers.map((d) => d.output().slice(-2_000)).join('\n---\n'));
      throw error;
    } finally {
      for (const d of dispatchers.slice(1)) d.child.kill('SIGTERM');
    }
    const codes = await Promise.all(dispatchers.slice(1).map((d) => d.exited));
    expect(codes).toEqual([0, 0, 0]);

    const report = checkHistory(expectedOf(written), receiver.events);
    expect(report.lost).toEqual([]);
    expect(report.unexpected).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NULL`,
    );
    expect(rows[0]!.n).toBe(0);
    // The survivors shared the rest (SKIP LOCKED), each publishing some of it.
    const publishedBy = dispatchers
      .slice(1)
      .map((d) => Number(/stopped published=(\d+)/.exec(d.output())?.[1] ?? -1));
    expect(
      publishedBy.every((n) => n > 0),
      String(publishedBy),
    ).toBe(true);
  }, 300_000);
});

describe('dispatchers taking runs first beside dispatchers taking heads first', () => {
  // What a rolling upgrade across migration 019 runs: a dispatcher of the earlier version claims
  // heads first (the four-argument claim), a new one runs first, on the same chains.
  it('two of each on 300 aggregates 20 deep: none lost, none in flight twice, order held', async () => {
    await resetOutbox(db.pool);
    const receiver = await startWebhookReceiver({ holdMs: () => Math.random() * 2 });
    const written = await enqueueCommitted(db.pool, manyMessages(300, 20));
    const shapes = ['runs-first', 'heads-first', 'runs-first', 'heads-first'];
    const dispatchers = shapes.map((shape) =>
      startCli(dispatchArgs(db.url, receiver.url, '--claim-shape', shape, '--batch-size', '100')),
    );
    try {
      await expect
        .poll(() => checkHistory(expectedOf(written), receiver.events).lost.length, {
          timeout: 180_000,
          interval: 500,
        })
        .toBe(0);
    } catch (error) {
      process.stderr.write(dispatchers.map((d) => d.output().slice(-2_000)).join('\n---\n'));
      throw error;
    } finally {
      for (const d of dispatchers) d.child.kill('SIGTERM');
    }
    expect(await Promise.all(dispatchers.map((d) => d.exited))).toEqual([0, 0, 0, 0]);
    await receiver.close();
    const report = checkHistory(expectedOf(written), receiver.events);
    expect(report.unexpected).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.duplicates).toBe(0);
    const publishedBy = dispatchers.map((d) =>
      Number(/stopped published=(\d+)/.exec(d.output())?.[1] ?? -1),
    );
    expect(
      publishedBy.every((n) => n > 0),
      String(publishedBy),
    ).toBe(true);
  }, 300_000);
});
