import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { EnqueuedMessage, OutboxMessage } from '../../src/index.js';
import { startCli, type CliProcess } from '../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { enqueueLanes, laneDispatchArgs } from '../helpers/lanes.js';
import { runCli } from '../helpers/run-cli.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

/**
 * Held messages on the lanes engine (migration 027) through a `kill -9`: `outbox dispatch
 * --engine lanes` publishes while held messages hold their aggregates; `outbox approve` and
 * `outbox reject` (each its own process) decide them while the dispatcher is killed without a
 * stop, and a second dispatcher takes the lanes over when the lease ends. Nothing is lost, no
 * rejected or undecided message is published, each aggregate goes out in order, every decision
 * is taken once (the second attempt is refused), and what a crash publishes again carries the
 * same message id (no second copy is ever written).
 */
let db: TestDatabase;
let receiver: WebhookReceiver;
const processes: CliProcess[] = [];
beforeAll(async () => {
  db = await createTestDatabase();
  // Slow deliveries of what held messages held back, so that the kill finds their runs in flight.
  receiver = await startWebhookReceiver({
    holdMs: (envelope) => ((envelope.payload as { round?: number }).round! >= 2 ? 15 : 0),
  });
});
afterEach(async () => {
  for (const p of processes.splice(0)) {
    p.child.kill('SIGKILL');
    await p.exited;
  }
});
afterAll(async () => {
  await receiver?.close();
  await db?.drop();
});

const AGGREGATES = 20;
const ROUNDS = 10;
/** Aggregates k-0..k-9 have their third message held: k-0..k-5 approved, k-6..k-9 rejected. */
const HELD = 10;
const APPROVED = 6;

describe('lanes engine: held messages through a kill -9', () => {
  it('loses nothing, publishes no rejected or undecided message, keeps each aggregate in order', async () => {
    const written: { message: OutboxMessage; result: EnqueuedMessage }[] = [];
    const writeRound = async (round: number) => {
      const messages: OutboxMessage[] = Array.from({ length: AGGREGATES }, (_, a) => ({
        topic: 'payment.refund',
        aggregateId: `k-${a}`,
        payload: { round },
        ...(round === 2 && a < HELD ? { requiresApproval: true } : {}),
      }));
      const results = await enqueueLanes(db.pool, messages);
      results.forEach((result, i) => written.push({ message: messages[i]!, result }));
    };
    for (let round = 0; round < ROUNDS / 2; round++) await writeRound(round);

    const first = startCli(
      laneDispatchArgs(db.url, receiver.url, '--lease-ms', '2000', '--dead-letter-policy', 'skip'),
    );
    processes.push(first);
    // Everything but what waits behind the held messages: k-10..k-19 whole, k-0..k-9 up to 2.
    const flowing = (AGGREGATES - HELD) * (ROUNDS / 2) + HELD * 2;
    await expect.poll(() => receiver.distinct(), { timeout: 30_000 }).toBe(flowing);
    for (let round = ROUNDS / 2; round < ROUNDS; round++) await writeRound(round);

    const held = written.filter((w) => w.message.requiresApproval).map((w) => w.result);
    expect(held).toHaveLength(HELD);
    const approve = held.slice(0, APPROVED);
    const reject = held.slice(APPROVED);
    // The decisions in their own processes: the approval first, then the dispatcher killed while
    // it publishes what the approval let go, as the rejection runs.
    const approved = await runCli([
      'approve',
      ...approve.map((m) => m.id),
      '--engine',
      'lanes',
      '--by',
      'ops',
      '--database-url',
      db.url,
    ]);
    expect(approved.code, approved.stderr).toBe(0);
    const before = receiver.distinct();
    await expect.poll(() => receiver.distinct(), { timeout: 10_000 }).toBeGreaterThan(before);
    const rejecting = runCli([
      'reject',
      ...reject.map((m) => m.messageId),
      '--engine',
      'lanes',
      '--by',
      'ops',
      '--reason',
      'no',
      '--dead-letter-policy',
      'skip',
      '--database-url',
      db.url,
    ]);
    await new Promise((resolve) => setTimeout(resolve, 50 + Math.random() * 150));
    first.child.kill('SIGKILL');
    await first.exited;
    const killedAt = receiver.distinct();
    const rejected = await rejecting;
    expect(rejected.code, rejected.stderr).toBe(0);

    const second = startCli(
      laneDispatchArgs(db.url, receiver.url, '--lease-ms', '2000', '--dead-letter-policy', 'skip'),
    );
    processes.push(second);
    const rejectedIds = new Set(reject.map((m) => m.messageId));
    const expected = expectedOf(
      written.map((w) => w.result).filter((m) => !rejectedIds.has(m.messageId)),
    );
    await expect
      .poll(() => receiver.distinct(), { timeout: 60_000 })
      .toBe(AGGREGATES * ROUNDS - reject.length);
    await new Promise((resolve) => setTimeout(resolve, 500));

    const report = checkHistory(expected, receiver.events);
    console.log(
      `[lanes approvals kill -9] killed after ${killedAt - before} of the approved runs' messages; ${receiver.events.length} deliveries of ${expected.length} messages, ${report.duplicates} published again after the kill (same ids)`,
    );
    expect(report.lost).toEqual([]);
    expect(report.unexpected).toEqual([]); // no rejected message
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    // No second copy was written or decided: one row a message, one decision a held message.
    const counts = await db.pool.query<{ messages: number; approved: number; rejected: number }>(
      `SELECT (SELECT count(*) FROM outbox_lane_messages)::int AS messages,
              (SELECT count(*) FROM outbox_lane_approvals WHERE state = 'approved')::int AS approved,
              (SELECT count(*) FROM outbox_lane_approvals WHERE state = 'rejected')::int AS rejected`,
    );
    expect(counts.rows[0]).toEqual({
      messages: AGGREGATES * ROUNDS,
      approved: APPROVED,
      rejected: HELD - APPROVED,
    });
    const again = await runCli([
      'approve',
      approve[0]!.id,
      '--engine',
      'lanes',
      '--by',
      'ops-2',
      '--database-url',
      db.url,
    ]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/already approved by ops/);
  }, 120_000);
});
