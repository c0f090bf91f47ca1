import { performance } from 'node:perf_hooks';
import { beforeAll, describe, expect, it } from 'vitest';
import type { EnqueuedMessage, OutboxMessage } from '../../src/index.js';
import { startCli } from '../helpers/cli-process.js';
import type { TestDatabase } from '../helpers/database.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { enqueueLanes, laneDispatchArgs, lanesPending } from '../helpers/lanes.js';
import { useSlowReceiver } from '../helpers/kill9.js';
import type { WebhookReceiver } from '../helpers/webhook-receiver.js';

/**
 * kill -9 of `outbox dispatch --engine lanes` while tenant shares publish tenant B's trickle
 * ahead of tenant A's burst (migration 028): another dispatcher takes the lanes when the lease
 * ends; nothing is lost, every aggregate stays in order, and what is published twice is only
 * what the victim had published since its last cursor write (at most about a second before the
 * kill, CURSOR_SYNC_MS) or had in flight: not what it recorded as published ahead before that
 * (the victim runs ~5 s; 3 s is the bound).
 */
// Until `harness.fast()`, each delivery takes 5 ms: A's burst drains for a while.
const harness = useSlowReceiver({ slowMs: 5 });
let db: TestDatabase;
let receiver: WebhookReceiver;
beforeAll(() => {
  ({ db, receiver } = harness.current());
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('kill -9 of a lanes dispatcher mid-burst with tenant shares', () => {
  it('loses nothing, keeps order, and publishes again only what was not yet recorded', async () => {
    const written: EnqueuedMessage[] = [];
    for (let done = 0; done < 6_000; done += 1_000)
      written.push(
        ...(await enqueueLanes(
          db.pool,
          Array.from({ length: 1_000 }, (_, i) => ({
            topic: 'mail.send',
            aggregateId: `a-${(done + i) % 600}`,
            payload: { n: done + i },
            tenantId: 'tenant-a',
          })),
        )),
      );
    const args = laneDispatchArgs(db.url, receiver.url, '--batch-size', '50', '--lease-ms', '3000');
    const victim = startCli(args);
    // B's trickle: one message every 20 ms on 16 aggregates, before and after the kill.
    let trickling = true;
    const trickle = (async () => {
      for (let i = 0; trickling; i++) {
        const message: OutboxMessage = {
          topic: 'mail.send',
          aggregateId: `b-${i % 16}`,
          payload: { i },
          tenantId: 'tenant-b',
        };
        written.push(...(await enqueueLanes(db.pool, [message])));
        await sleep(20);
      }
    })();
    const isB = (id: string) =>
      written.find((m) => m.messageId === id)?.aggregateId.startsWith('b-');
    // Shares at work: B's messages out and recorded ahead while A's backlog waits.
    await expect
      .poll(
        async () =>
          (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM outbox_lane_ahead'))
            .rows[0]!.n,
        { timeout: 30_000 },
      )
      .toBeGreaterThan(5);
    await sleep(4_000);
    const atKill = receiver.distinct();
    expect(receiver.events.filter((e) => isB(e.messageId)).length).toBeGreaterThan(20);
    expect(receiver.distinct()).toBeLessThan(5_000);
    victim.child.kill('SIGKILL');
    const killedAt = performance.now();
    expect(await victim.exited).toBe('SIGKILL');
    // What the victim had recorded when it died: its lanes' cursors and what it recorded as
    // published ahead of them. Nothing of it may be published again.
    const recorded = await db.pool.query<{ lane: number; cursor: string }>(
      'SELECT lane, cursor::text AS cursor FROM outbox_lanes',
    );
    const cursorAtKill = new Map(recorded.rows.map((r) => [r.lane, BigInt(r.cursor)]));
    const aheadAtKill = new Set(
      (
        await db.pool.query<{ key: string }>(
          `SELECT lane || ':' || id AS key FROM outbox_lane_ahead`,
        )
      ).rows.map((r) => r.key),
    );
    harness.fast();
    await sleep(500);
    trickling = false;
    await trickle;

    const survivor = startCli(args);
    try {
      await expect.poll(() => receiver.distinct(), { timeout: 60_000 }).toBe(written.length);
      await expect.poll(() => lanesPending(db.pool), { timeout: 10_000 }).toBe(0);
    } catch (error) {
      process.stderr.write(`the survivor said:\n${survivor.output().slice(-4_000)}\n`);
      throw error;
    }
    survivor.child.kill('SIGTERM');
    expect(await survivor.exited).toBe(0);

    const report = checkHistory(expectedOf(written), receiver.events);
    expect(report.lost).toEqual([]);
    expect(report.unexpected).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    // Published twice: only what the victim had not recorded when it died (above its lane's
    // cursor, not recorded ahead of it): what it published since its last cursor write, about a
    // second (CURSOR_SYNC_MS), and a batch in flight. How long before the kill that began is
    // printed, not asserted: on a loaded machine a second of the victim's stretches (CI once
    // read 3,991 ms against a bound of 3,000 for what was, by the rows, unrecorded).
    const first = new Map<string, number>();
    const count = new Map<string, number>();
    for (const e of receiver.events) {
      if (!first.has(e.messageId)) first.set(e.messageId, e.start);
      count.set(e.messageId, (count.get(e.messageId) ?? 0) + 1);
    }
    const twice = [...count].filter(([, n]) => n > 1).map(([id]) => id);
    const earliest = Math.min(...twice.map((id) => first.get(id)!));
    console.log(
      `[lanes tenants kill -9] ${written.length} written, ${twice.length} published twice (${twice.filter((id) => isB(id)).length} of B), ${atKill} out at the kill, the earliest first published ${Math.round(killedAt - earliest)} ms before the kill`,
    );
    const places = await db.pool.query<{ lane: number; id: string; messageId: string }>(
      `SELECT lane, id::text AS id, message_id::text AS "messageId"
       FROM outbox_lane_messages WHERE message_id = ANY ($1::uuid[])`,
      [twice],
    );
    expect(places.rows).toHaveLength(twice.length);
    const recordedTwice = places.rows.filter(
      (r) => BigInt(r.id) <= cursorAtKill.get(r.lane)! || aheadAtKill.has(`${r.lane}:${r.id}`),
    );
    expect(recordedTwice).toEqual([]);
    // And some were unrecorded at the kill (the check above is not vacuous): the victim was
    // publishing A's burst when it died.
    expect(twice.length).toBeGreaterThan(0);
    const { rows } = await db.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM outbox_lane_ahead',
    );
    expect(rows[0]!.n).toBe(0);
  }, 180_000);
});
