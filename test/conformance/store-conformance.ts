import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { OutboxMessage } from '../../src/core/message.js';
import { InMemoryPublisher } from '../../src/publishers/memory/in-memory-publisher.js';
import type { OutgoingMessage } from '../../src/publishers/publisher.js';
import { startCli, dispatchArgs } from '../helpers/cli-process.js';
import { checkHistory, eventsInOrder, expectedOf } from '../helpers/history.js';
import { startWebhookReceiver } from '../helpers/webhook-receiver.js';
import type { ConformanceTarget, StoreUnderTest } from './store-under-test.js';

const NO_BACKOFF = { baseMs: 0, maxMs: 0, jitterMs: 0 };

/**
 * The guarantees every store gives (SPEC §2, "everywhere the same"), tested once: a test file per
 * store calls this with its {@link ConformanceTarget}. Each test gets a fresh, migrated database.
 */
export function describeStoreConformance(target: ConformanceTarget, available: boolean): void {
  describe.runIf(available)(`${target.name}: the outbox contract`, () => {
    let s: StoreUnderTest;
    beforeEach(async () => {
      s = await target.open();
    });
    afterEach(async () => {
      await s.close();
    });

    it('writes a message if and only if its business transaction commits (G1)', async () => {
      const written = await s.writeOrder('o1', [
        { topic: 'payment.charge', aggregateId: 'order:1', payload: { amount: 1200 } },
        { topic: 'mail.send', aggregateId: 'order:1', payload: { template: 'receipt' } },
      ]);
      expect(written.map((m) => m.sequence)).toEqual([1, 2]);
      expect([await s.orders(), await s.messages()]).toEqual([1, 2]);

      // The contract test of the reference design: a failure after the inserts leaves nothing.
      await expect(
        s.writeOrder(
          'o2',
          [{ topic: 'payment.charge', aggregateId: 'order:2', payload: { amount: 1 } }],
          { failAfterEnqueue: true },
        ),
      ).rejects.toThrow(/after the enqueue/);
      expect([await s.orders(), await s.messages()]).toEqual([1, 2]);
      // The rolled-back transaction did not use up a sequence either: no hole for consumers.
      const [next] = await s.writeOrder('o2', [
        { topic: 'payment.charge', aggregateId: 'order:2', payload: { amount: 1 } },
      ]);
      expect(next!.sequence).toBe(1);
    });

    it('refuses to write outside a transaction, and writes nothing', async () => {
      await expect(
        s.enqueueOutsideTransaction({ topic: 't', aggregateId: 'a', payload: 1 }),
      ).rejects.toMatchObject({ name: 'OutboxAutocommitError' });
      expect(await s.messages()).toBe(0);
    });

    it('refuses bad input with a validation error and writes nothing of the transaction (§6)', async () => {
      const cyclic: Record<string, unknown> = {};
      cyclic.self = cyclic;
      const bad: [string, OutboxMessage][] = [
        ['empty topic', { topic: '', aggregateId: 'a', payload: 1 }],
        ['long aggregate id', { topic: 't', aggregateId: 'a'.repeat(256), payload: 1 }],
        ['BigInt payload', { topic: 't', aggregateId: 'a', payload: 10n as never }],
        ['cyclic payload', { topic: 't', aggregateId: 'a', payload: cyclic as never }],
        [
          'header not a string',
          { topic: 't', aggregateId: 'a', payload: 1, headers: { n: 1 as never } },
        ],
        ['negative delay', { topic: 't', aggregateId: 'a', payload: 1, delayMs: -1 }],
        ['NaN delay', { topic: 't', aggregateId: 'a', payload: 1, delayMs: Number.NaN }],
      ];
      for (const [what, message] of bad) {
        const valid = { topic: 't', aggregateId: 'a', payload: 'fine' };
        await expect(s.writeOrder(`bad-${what}`, [valid, message]), what).rejects.toMatchObject({
          name: 'OutboxValidationError',
        });
      }
      expect([await s.orders(), await s.messages()]).toEqual([0, 0]);
    });

    it('publishes each aggregate in sequence order; a failing head holds back only its own aggregate (G4)', async () => {
      const written = [];
      // Ten transactions, each writing one message for each of four aggregates.
      for (let n = 0; n < 10; n++)
        written.push(
          ...(await s.writeOrder(
            `t${n}`,
            [0, 1, 2, 3].map((a) => ({
              topic: 'work.do',
              aggregateId: `agg-${a}`,
              payload: { a, n },
            })),
          )),
        );
      const blocked = written.find((m) => m.aggregateId === 'agg-0' && m.sequence === 3)!;
      const publisher = new InMemoryPublisher({
        inject: (m: OutgoingMessage) =>
          m.id === blocked.messageId ? { status: 'retryable', error: 'broker said no' } : undefined,
      });
      // A long backoff: the failed head stays out of reach for the rest of the test.
      const result = await s
        .dispatcher({ publisher, backoff: { baseMs: 600_000, maxMs: 600_000, jitterMs: 0 } })
        .drain();
      expect(result.retried).toBe(1);
      // Aggregates 1-3 went out entirely; aggregate 0 up to its failing head and not beyond.
      const sent = publisher.published.map((m) => `${m.aggregateId}#${m.sequence}`);
      for (const a of [1, 2, 3])
        expect(sent.filter((x) => x.startsWith(`agg-${a}#`))).toHaveLength(10);
      expect(sent.filter((x) => x.startsWith('agg-0#')).sort()).toEqual(['agg-0#1', 'agg-0#2']);
      const report = checkHistory(
        expectedOf(written.filter((m) => m.aggregateId !== 'agg-0' || m.sequence < 3)),
        eventsInOrder(publisher.published),
      );
      expect(report.lost).toEqual([]);
      expect(report.orderViolations).toEqual([]);
      expect(await s.pending()).toBe(8);
    });

    it('fences off the settle of a claim whose lease expired and was taken over (G3)', async (ctx) => {
      if (!s.store) {
        process.stdout.write(
          `[conformance ${target.name}] claim/settle fencing skipped: this engine is no OutboxStore (it fences by lane lease, not by claim)\n`,
        );
        ctx.skip();
        return;
      }
      await s.writeOrder('f', [
        { topic: 'work.do', aggregateId: 'f', payload: 1 },
        { topic: 'work.do', aggregateId: 'g', payload: 2 },
      ]);
      const store = s.store();
      const first = await store.claim({ owner: 'first', batchSize: 10, leaseMs: 1 });
      expect(first).toHaveLength(2);
      let second: OutgoingMessage[] = [];
      // Once the 1 ms lease has run out, another claim takes the same messages.
      await expect
        .poll(async () => {
          second = await store.claim({ owner: 'second', batchSize: 10, leaseMs: 600_000 });
          return second.length;
        })
        .toBe(2);
      const published = (ms: OutgoingMessage[]) =>
        ms.map((m) => ({ rowId: m.rowId, kind: 'published' as const }));
      const request = { deadLettersBlock: true, leaseMs: 600_000 };
      expect((await store.settle('first', published(first), request)).settled).toEqual([]);
      expect(await s.pending()).toBe(2);
      const settled = (await store.settle('second', published(second), request)).settled;
      expect(settled.sort()).toEqual(second.map((m) => m.rowId).sort());
      expect(await s.pending()).toBe(0);
    });

    it('dead-letters a message after its attempts, lists it, and publishes it after a replay (G6)', async () => {
      const [head, next] = await s.writeOrder('d', [
        { topic: 'payment.charge', aggregateId: 'order:d', payload: 1 },
        { topic: 'mail.send', aggregateId: 'order:d', payload: 2 },
      ]);
      let broken = true;
      const publisher = new InMemoryPublisher({
        inject: (m: OutgoingMessage) =>
          broken && m.id === head!.messageId
            ? { status: 'retryable', error: 'card processor timed out' }
            : undefined,
      });
      const options = { publisher, maxAttempts: 2, backoff: NO_BACKOFF };
      const first = await s.dispatcher(options).drain();
      expect(first).toMatchObject({ retried: 1, deadLettered: 1, published: 0 });
      const dead = await s.deadLetters();
      expect(dead.map((d) => [d.messageId, d.attempts])).toEqual([[head!.messageId, 2]]);
      expect(dead[0]!.lastError).toContain('card processor timed out');
      // Under `hold` (the default) the dead head keeps its successor back.
      expect(await s.pending()).toBe(1);

      broken = false;
      expect(await s.replayAllDead()).toBe(1);
      await s.dispatcher(options).drain();
      expect(publisher.published.map((m) => m.id)).toEqual([head!.messageId, next!.messageId]);
      expect(await s.deadLetters()).toEqual([]);
      expect(await s.pending()).toBe(0);
    });
  });

  describe.runIf(available)(`${target.name}: kill -9 of a dispatcher process`, () => {
    it('loses nothing and keeps every aggregate in order while other processes take over (G2, G4)', async () => {
      const s = await target.open();
      let slow = true;
      // While `slow`, every delivery takes 200 ms: the first dispatcher is killed mid-batch.
      const receiver = await startWebhookReceiver({ holdMs: () => (slow ? 200 : 0) });
      try {
        const written = [];
        for (let n = 0; n < 4; n++)
          written.push(
            ...(await s.writeOrder(
              `k${n}`,
              Array.from({ length: 30 }, (_, a) => ({
                topic: 'work.do',
                aggregateId: `agg-${a}`,
                payload: { a, n },
              })),
            )),
          );
        const args = dispatchArgs(s.url, receiver.url, '--batch-size', '40', '--lease-ms', '3000');
        const start = (a: string[]) => target.dispatchProcess?.(a) ?? startCli(a);
        const victim = start(args);
        await expect.poll(() => s.leased(), { timeout: 30_000 }).toBeGreaterThan(0);
        await expect.poll(() => receiver.events.length, { timeout: 30_000 }).toBeGreaterThan(0);
        victim.child.kill('SIGKILL');
        expect(await victim.exited).toBe('SIGKILL');
        const leasedAtKill = await s.leased();
        slow = false;

        // Two dispatcher processes on the same database take over once the lease expires.
        const survivors = [start(args), start(args)];
        try {
          await expect.poll(() => receiver.distinct(), { timeout: 60_000 }).toBe(written.length);
        } catch (error) {
          for (const p of survivors)
            process.stderr.write(`a survivor said:\n${p.output().slice(-3_000)}\n`);
          throw error;
        }
        for (const p of survivors) p.child.kill('SIGTERM');
        expect(await Promise.all(survivors.map((p) => p.exited))).toEqual([0, 0]);

        const report = checkHistory(expectedOf(written), receiver.events);
        expect(report.lost).toEqual([]);
        expect(report.unexpected).toEqual([]);
        expect(report.orderViolations).toEqual([]);
        expect(report.concurrentDuplicates).toEqual([]);
        expect(await s.pending()).toBe(0);
        // The victim died holding leases, and their messages were claimed a second time.
        if (leasedAtKill > 0 && s.maxAttempts)
          expect(await s.maxAttempts()).toBeGreaterThanOrEqual(2);
        process.stdout.write(
          `[conformance ${target.name}] kill -9 with ${leasedAtKill} leased; ${written.length} messages, ${report.duplicates} duplicate deliveries, 0 lost, 0 out of order\n`,
        );
      } finally {
        await receiver.close();
        await s.close();
      }
    }, 120_000);
  });
}
