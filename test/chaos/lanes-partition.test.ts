import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, type CliProcess } from '../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { sleep } from '../helpers/fault-run.js';
import { startFreezeProxy, type FreezeProxy } from '../helpers/freeze-proxy.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { enqueueLanes, laneDispatchArgs, laneOwners, lanesPending } from '../helpers/lanes.js';
import { manyMessages } from '../helpers/outbox-fixtures.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

/**
 * A network partition between `outbox dispatch --engine lanes` (process A) and Postgres, as
 * test/chaos/partition.test.ts plays it for the claim engine: every connection of A goes through
 * a proxy that freezes them (bytes dropped, nothing closed) for longer than the lane lease, then
 * lets new connections through while the frozen ones stay dead. Writers reach Postgres directly;
 * a second dispatcher (B, direct) takes A's lanes once their leases expire. A publishes to
 * /A, B to /B of one receiver, so each delivery says who made it.
 *
 * G2: nothing lost. G4: each aggregate in order. G3: no message in flight twice at once, and A
 * publishes nothing of a lane after B took it. And A itself: it resumes after the heal (takes
 * its share back from B), and a SIGTERM during a second partition ends it.
 */
let db: TestDatabase;
let receiver: WebhookReceiver;
let proxy: FreezeProxy;
const processes: CliProcess[] = [];
/** While set, each delivery is held this long: the freeze lands in the middle of a batch. */
let holdMs = 0;
beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startWebhookReceiver({ holdMs: () => holdMs });
  proxy = await startFreezeProxy(Number(new URL(db.url).port || 5432));
});
afterAll(async () => {
  for (const p of processes) {
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
    await p.exited;
  }
  await proxy?.close();
  await receiver?.close();
  await db?.drop();
});

const LEASE_MS = 6_000;
const FREEZE_MS = 12_000;

describe('network partition of a lanes dispatcher (connections frozen, not reset)', () => {
  it('a second dispatcher takes the lanes: nothing lost, order kept, the frozen one publishes nothing it lost; it resumes after the heal', async () => {
    const args = (url: string, path: string) =>
      laneDispatchArgs(
        url,
        receiver.url.replace(/\/hook$/, path),
        '--lease-ms',
        String(LEASE_MS),
        '--batch-size',
        '10',
      );
    const a = startCli(args(proxy.url(db.url), '/A'));
    processes.push(a);
    const written = await enqueueLanes(db.pool, manyMessages(5, 4));
    await expect.poll(() => receiver.distinct(), { timeout: 30_000 }).toBe(20);

    // A batch in flight when the partition starts: its next call cannot go through.
    holdMs = 100;
    written.push(...(await enqueueLanes(db.pool, manyMessages(5, 4, 'payment.refund'))));
    await expect.poll(() => receiver.distinct(), { timeout: 30_000 }).toBeGreaterThan(20);
    proxy.freeze();
    const frozenAt = performance.now();
    holdMs = 0;

    const b = startCli(args(db.url, '/B'));
    processes.push(b);
    // When B is first seen owning each lane (sampled every 25 ms: an upper bound of the take).
    const takenByB = new Map<number, number>();
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const owners = await laneOwners(db.pool).catch(() => new Map<number, string | null>());
        const now = performance.now();
        for (const [lane, owner] of owners)
          if (owner?.includes(`:${b.child.pid}:`) && !takenByB.has(lane)) takenByB.set(lane, now);
        await sleep(25);
      }
    })();

    // Written during the partition, and (below) after it.
    written.push(...(await enqueueLanes(db.pool, manyMessages(5, 2, 'mail.send'))));
    await sleep(FREEZE_MS);
    const frozenAtHeal = proxy.counts().frozen;
    proxy.heal();
    const healedAt = performance.now();
    written.push(...(await enqueueLanes(db.pool, manyMessages(5, 2, 'sms.send'))));
    await expect.poll(() => receiver.distinct(), { timeout: 30_000, interval: 50 }).toBe(60);
    const allInMs = Math.round(performance.now() - healedAt);

    // A after the heal: it registers again and B gives it its share back (B rebalances every
    // lease / 3). A process that never comes back holds no lane.
    const ownedByA = async () =>
      [...(await laneOwners(db.pool)).values()].filter((o) => o?.includes(`:${a.child.pid}:`))
        .length;
    let aResumedInMs: number | 'never' = 'never';
    for (const deadline = performance.now() + 20_000; performance.now() < deadline;) {
      if ((await ownedByA()) > 0) {
        aResumedInMs = Math.round(performance.now() - healedAt);
        break;
      }
      await sleep(100);
    }
    watching = false;
    await watcher;

    const report = checkHistory(expectedOf(written), receiver.events);
    const { rows: laneOf } = await db.pool.query<{ message_id: string; lane: number }>(
      'SELECT message_id::text, lane FROM outbox_lane_messages',
    );
    const lane = new Map(laneOf.map((r) => [r.message_id, Number(r.lane)]));
    const viaA = receiver.events.filter((e) => e.via === '/A');
    const viaB = receiver.events.filter((e) => e.via === '/B');
    // G3: a delivery by A that started after B was seen owning that lane (and before A took
    // any lane back after the heal).
    const lateByA = viaA.filter((e) => {
      const taken = takenByB.get(lane.get(e.messageId)!);
      return taken !== undefined && e.start > taken && e.start < healedAt;
    });
    const firstB = Math.min(...viaB.map((e) => e.start));
    console.log(
      `[lanes partition] messages ${written.length}, delivered ${receiver.distinct()} ` +
        `(A ${viaA.length}, B ${viaB.length}); lost ${report.lost.length}, out of order ` +
        `${report.orderViolations.length}, concurrent duplicates ${report.concurrentDuplicates.length}, ` +
        `duplicates ${report.duplicates}; A published after B took the lane: ${lateByA.length}; ` +
        `B's first delivery ${Math.round(firstB - frozenAt)} ms after the freeze; lanes B took ` +
        `${takenByB.size}; frozen connections ${frozenAtHeal}; all delivered ${allInMs} ms after ` +
        `the heal; A owns lanes again: ${aResumedInMs === 'never' ? 'never (20 s)' : `${aResumedInMs} ms after the heal`}`,
    );
    expect(written).toHaveLength(60);
    expect(report.lost).toEqual([]);
    expect(report.unexpected).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    expect(lateByA).toEqual([]);
    // B did the work of the partition: it took lanes, and published.
    expect(takenByB.size).toBeGreaterThan(0);
    expect(viaB.length).toBeGreaterThan(0);
    await expect.poll(() => lanesPending(db.pool), { timeout: 30_000 }).toBe(0);
    expect(aResumedInMs, a.output().slice(-3_000)).not.toBe('never');

    // A graceful stop of A during a second partition: it must exit by itself, code 0.
    proxy.freeze();
    const stopAt = performance.now();
    a.child.kill('SIGTERM');
    const exit = await Promise.race([a.exited, sleep(45_000).then(() => 'lingering')]);
    const exitedInMs = Math.round(performance.now() - stopAt);
    console.log(
      `[lanes partition] SIGTERM during a second partition: ${exit} after ${exitedInMs} ms`,
    );
    expect(exit, a.output().slice(-3_000)).toBe(0);
    b.child.kill('SIGTERM');
    expect(await b.exited).toBe(0);
  }, 180_000);
});
