import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  approveMessages,
  fromPg,
  migrate,
  MIGRATIONS,
  PgOutboxStore,
  replayDeadLetters,
} from '../../../src/index.js';
import { startCli } from '../../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { checkHistory, expectedOf } from '../../helpers/history.js';
import { enqueueCommitted, manyMessages } from '../../helpers/outbox-fixtures.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

/**
 * Migration 012 (issue 25) on an outbox in use: messages written and half-dispatched at version
 * 11 — pending chains, a head dead-lettered under hold, a held head waiting for approval, a head
 * mid-lease of a dispatcher that then disappears, heads already settled by the version-11 settle
 * — then the migration, then two dispatcher processes side by side. Nothing is lost, nothing
 * overtakes within an aggregate, nothing is in flight twice (the history checker).
 */
let db: TestDatabase;
let receiver: WebhookReceiver;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
  receiver = await startWebhookReceiver({ holdMs: () => 5 });
});
afterAll(async () => {
  await receiver?.close();
  await db?.drop();
});

describe('migration 012 with messages in every state', () => {
  it('backfills the chains, and two dispatchers deliver everything in order afterwards', async () => {
    const executor = fromPg(db.pool);
    await migrate(executor, { migrations: MIGRATIONS.slice(0, 11) });
    const chains = await enqueueCommitted(db.pool, manyMessages(30, 4));
    const held = await enqueueCommitted(db.pool, [
      { topic: 'payment.refund', aggregateId: 'held', payload: { n: 1 }, requiresApproval: true },
      { topic: 'payment.refund', aggregateId: 'held', payload: { n: 2 } },
    ]);
    const unordered = await enqueueCommitted(
      db.pool,
      Array.from({ length: 10 }, (_, n) => ({
        topic: 'mail.send',
        aggregateId: 'newsletter',
        payload: { n },
        ordered: false,
      })),
    );
    // Version 11's claim and settle (its functions are still in place) dispatch ten heads; the
    // three-argument claim, as a dispatcher of that version called it (no tenant shares).
    const store = new PgOutboxStore(executor, { tenantShares: false });
    const first = await store.claim({ owner: 'v11#1', batchSize: 10, leaseMs: 30_000 });
    await store.settle(
      'v11#1',
      first.map((m) => ({ rowId: m.rowId!, kind: 'published' as const })),
      { deadLettersBlock: true, leaseMs: 30_000 },
    );
    const before = new Set(first.map((m) => m.id));
    // A head dead-lettered under hold, and a head leased by a dispatcher that is gone.
    const pendingHead = async (aggregate: string) =>
      (
        await db.pool.query<{ id: string }>(
          `SELECT id::text FROM outbox WHERE aggregate_id = $1 AND dispatched_at IS NULL
           ORDER BY sequence LIMIT 1`,
          [aggregate],
        )
      ).rows[0]!.id;
    const dead = await pendingHead('agg-20');
    await db.pool.query(
      `UPDATE outbox SET dead_lettered_at = now(), last_error = 'poison' WHERE id = $1`,
      [dead],
    );
    const leased = await pendingHead('agg-21');
    await db.pool.query(
      `UPDATE outbox SET lease_owner = 'gone#1', lease_expires_at = now() + interval '3 seconds',
                         attempts = 1 WHERE id = $1`,
      [leased],
    );

    await migrate(executor);
    // Every pending ordered message but an aggregate's first has its predecessor.
    const { rows: missing } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM outbox o
       WHERE o.dispatched_at IS NULL AND o.ordered AND o.prev_id IS NULL
         AND EXISTS (SELECT 1 FROM outbox p WHERE p.aggregate_id = o.aggregate_id
                       AND p.dispatched_at IS NULL AND p.ordered AND p.sequence < o.sequence)`,
    );
    expect(missing[0]!.n).toBe(0);
    // Written after the migration, behind what version 11 left pending: the trigger must know
    // each aggregate's last ordered message (outbox_aggregates.last_ordered_id, backfilled).
    const after = await enqueueCommitted(db.pool, manyMessages(30, 1));

    const args = [
      'dispatch',
      '--database-url',
      db.url,
      '--publisher',
      receiver.url,
      '--batch-size',
      '20',
      '--poll-interval-ms',
      '100',
    ];
    const got = (messageId: string) => receiver.events.some((e) => e.messageId === messageId);
    const dispatchers = [startCli(args), startCli(args)];
    try {
      const everything = [...chains, ...after, ...held, ...unordered].filter(
        (m) => !before.has(m.messageId),
      );
      const deadAndBehind = chains.filter((m) => m.aggregateId === 'agg-20');
      // All but the held aggregate and the dead letter's aggregate arrive by themselves.
      const free = everything.filter((m) => m.aggregateId !== 'held' && m.aggregateId !== 'agg-20');
      await expect.poll(() => free.every((m) => got(m.messageId)), { timeout: 60_000 }).toBe(true);
      expect(deadAndBehind.some((m) => got(m.messageId))).toBe(false);
      expect(held.some((m) => got(m.messageId))).toBe(false);
      await replayDeadLetters(executor, { ids: [dead] });
      await approveMessages(executor, [held[0]!.id], { by: 'upgrade test' });
      await expect
        .poll(() => everything.every((m) => got(m.messageId)), { timeout: 60_000 })
        .toBe(true);
      const report = checkHistory(
        expectedOf(everything, (m) => m.topic !== 'mail.send'),
        receiver.events,
      );
      expect(report.lost).toEqual([]);
      expect(report.orderViolations).toEqual([]);
      expect(report.concurrentDuplicates).toEqual([]);
    } finally {
      for (const d of dispatchers) d.child.kill('SIGTERM');
      for (const d of dispatchers) await d.exited;
    }
  }, 180_000);
});
