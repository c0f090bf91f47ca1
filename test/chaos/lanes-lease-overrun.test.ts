import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EnqueuedMessage, OutboxMessage } from '../../src/index.js';
import { startCli, type CliProcess } from '../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { sleep } from '../helpers/fault-run.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { enqueueLanes, laneDispatchArgs, lanesPending } from '../helpers/lanes.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

/**
 * G3 under a slow destination, no crash: two `outbox dispatch --engine lanes` processes (A, then
 * B) share the lanes while every delivery takes 150 ms and some aggregates have parked runs to
 * retry. A dispatcher's cycle publishes a batch (up to lease / 2) and then its due parked
 * messages (up to another lease / 2); nothing renews its lease in between. Checked: no message
 * in flight from both at once, and no delivery by one while the other owns the message's lane.
 */
let db: TestDatabase;
let receiver: WebhookReceiver;
const processes: CliProcess[] = [];
/** Each aggregate `p-*` has its first message refused once: its run parks behind it. */
const refusedOnce = new Set<string>();
beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startWebhookReceiver({
    holdMs: () => 150,
    status: (envelope) => {
      const first = envelope.aggregateId.startsWith('p-') && envelope.sequence === 1;
      if (!first || refusedOnce.has(envelope.id)) return 200;
      refusedOnce.add(envelope.id);
      return 503;
    },
  });
});
afterAll(async () => {
  for (const p of processes) {
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
    await p.exited;
  }
  await receiver?.close();
  await db?.drop();
});

const LEASE_MS = 3_000;

describe('lanes: two dispatchers, a slow destination, parked runs (no crash)', () => {
  // Before the fix a dispatcher published after its lanes' leases expired: on f4af0c8 (3 runs)
  // 1-4 settles of the parked path fenced per run (OBX01) and 84-362 duplicate deliveries; on
  // 5eaa570 (5 runs) a livelock, 73-188 of ~450 messages still undelivered 60 s after the writer
  // stopped. The leases were renewed only at the start of a cycle while each publish call had
  // a fresh leaseMs / 2 deadline: the batch and then the parked path (or a batch read ahead,
  // which defers the balance) outlasted a lease. Now the leases are renewed before the parked
  // path when due, and every publish deadline is bound by the last renewal + 5/6 of the lease
  // (measured with the fix: 0 fenced, 29-40 duplicates, all after lanes moved).
  it('no message is delivered by a dispatcher while the other owns its lane, none twice at once', async () => {
    const args = (path: string) =>
      laneDispatchArgs(
        db.url,
        receiver.url.replace(/\/hook$/, path),
        '--lease-ms',
        String(LEASE_MS),
        '--batch-size',
        '100',
        '--max-attempts',
        '100',
        '--backoff-base-ms',
        '400',
        '--backoff-max-ms',
        '400',
        '--backoff-jitter-ms',
        '0',
      );
    // Lane ownership sampled every 20 ms: [time, lane -> owner pid or null].
    const samples: [number, Map<number, string | null>][] = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const { rows } = await db.pool.query<{ lane: number; owner: string | null }>(
          `SELECT lane, CASE WHEN lease_expires_at > now() THEN owner END AS owner FROM outbox_lanes`,
        );
        samples.push([performance.now(), new Map(rows.map((r) => [Number(r.lane), r.owner]))]);
        await sleep(20);
      }
    })();

    const written: EnqueuedMessage[] = [];
    // 12 aggregates with a run of 12 behind a head refused once, and 12 others written on.
    const parkedRuns: OutboxMessage[] = [];
    for (let n = 0; n < 12; n++)
      for (let a = 0; a < 12; a++)
        parkedRuns.push({ topic: 'payment.charge', aggregateId: `p-${a}`, payload: { n } });
    const a = startCli(args('/A'));
    processes.push(a);
    written.push(...(await enqueueLanes(db.pool, parkedRuns)));
    let writing = true;
    const writer = (async () => {
      for (let round = 0; writing; round++) {
        written.push(
          ...(await enqueueLanes(
            db.pool,
            Array.from({ length: 12 }, (_, w) => ({
              topic: 'mail.send',
              aggregateId: `w-${w}`,
              payload: { round },
            })),
          )),
        );
        await sleep(300);
      }
    })();
    await expect.poll(() => receiver.distinct(), { timeout: 30_000 }).toBeGreaterThan(20);
    const b = startCli(args('/B'));
    processes.push(b);
    await sleep(6_000);
    writing = false;
    await writer;
    let drained = true;
    try {
      await expect
        .poll(() => receiver.distinct(), { timeout: 40_000, interval: 200 })
        .toBe(written.length);
      await expect.poll(() => lanesPending(db.pool), { timeout: 20_000 }).toBe(0);
    } catch {
      drained = false;
    }
    sampling = false;
    await sampler;

    const { rows } = await db.pool.query<{ message_id: string; lane: number }>(
      'SELECT message_id::text, lane FROM outbox_lane_messages',
    );
    const laneOf = new Map(rows.map((r) => [r.message_id, Number(r.lane)]));
    const pidOf = { '/A': `:${a.child.pid}:`, '/B': `:${b.child.pid}:` } as Record<string, string>;
    /** The other dispatcher owned the lane in the samples just before AND after the start. */
    const whileOtherOwned = receiver.events.filter((e) => {
      const lane = laneOf.get(e.messageId)!;
      const other = pidOf[e.via === '/A' ? '/B' : '/A']!;
      const before = [...samples].reverse().find(([t]) => t <= e.start);
      const after = samples.find(([t]) => t >= e.start);
      return (
        before?.[1].get(lane)?.includes(other) === true &&
        after?.[1].get(lane)?.includes(other) === true
      );
    });
    const report = checkHistory(expectedOf(written), receiver.events);
    const viaOf = new Map(receiver.events.map((e) => [e.publisher, e.via]));
    const concurrentVia = report.concurrentDuplicates.map((d) =>
      d.publishers.map((p) => viaOf.get(p)).join('+'),
    );
    const fenced = (p: CliProcess) => (p.output().match(/are no longer owned by/g) ?? []).length;
    console.log(
      `[lanes lease overrun] messages ${written.length}, delivered ${receiver.distinct()} ` +
        `(A ${receiver.events.filter((e) => e.via === '/A').length}, B ` +
        `${receiver.events.filter((e) => e.via === '/B').length}); lost ${report.lost.length}, ` +
        `out of order ${report.orderViolations.length}, duplicates ${report.duplicates}, ` +
        `concurrent duplicates ${report.concurrentDuplicates.length}; delivered while the other ` +
        `dispatcher owned the lane ${whileOtherOwned.length}; refused once ${refusedOnce.size}; ` +
        `concurrent pairs ${JSON.stringify(concurrentVia)}; fenced settles: A ${fenced(a)}, B ${fenced(b)}`,
    );
    expect(drained).toBe(true);
    expect(report.lost).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    expect(whileOtherOwned).toEqual([]);
    expect(fenced(a) + fenced(b)).toBe(0);
  }, 120_000);
});
