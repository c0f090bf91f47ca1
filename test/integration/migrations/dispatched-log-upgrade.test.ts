import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  approveMessages,
  fromPg,
  migrate,
  MIGRATIONS,
  PgOutboxStore,
  replayDeadLetters,
} from '../../../src/index.js';
import { pruneOutbox } from '../../../src/retention/prune-outbox.js';
import { startCli } from '../../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { checkHistory, expectedOf } from '../../helpers/history.js';
import { enqueueCommitted, manyMessages } from '../../helpers/outbox-fixtures.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

/**
 * Migration 018 (the dispatched ring) on an outbox in use: at version 17, chains half dispatched
 * by the version-17 settle (rows that stay in `outbox` with their `dispatched_at`), a head
 * dead-lettered under hold, a held head waiting for approval, and a batch mid-lease whose settle
 * comes only after the migration (a dispatcher of the old version finishing its batch: it calls
 * the same function, which the migration re-created). Then two dispatcher processes side by
 * side. Nothing is lost, nothing overtakes within an aggregate, nothing is in flight twice; the
 * old dispatched rows stay readable and prunable.
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

const count = async (sql: string) => (await db.pool.query<{ n: number }>(sql)).rows[0]!.n;

describe('migration 018 with messages in every state', () => {
  it('settles an old lease into the ring, keeps old dispatched rows, and delivers everything in order', async () => {
    const executor = fromPg(db.pool);
    await migrate(executor, { migrations: MIGRATIONS.slice(0, 17) });
    const chains = await enqueueCommitted(db.pool, manyMessages(30, 4));
    const held = await enqueueCommitted(db.pool, [
      { topic: 'payment.refund', aggregateId: 'held', payload: { n: 1 }, requiresApproval: true },
      { topic: 'payment.refund', aggregateId: 'held', payload: { n: 2 } },
    ]);
    const store = new PgOutboxStore(executor);
    // Ten heads dispatched by version 17's settle: they stay in outbox, dispatched.
    const first = await store.claim({ owner: 'v17#1', batchSize: 10, leaseMs: 30_000 });
    await store.settle(
      'v17#1',
      first.map((m) => ({ rowId: m.rowId!, kind: 'published' as const })),
      { deadLettersBlock: true, leaseMs: 30_000 },
    );
    expect(first).toHaveLength(10);
    const before = new Set(first.map((m) => m.id));
    // A batch leased at version 17, settled after the migration.
    const inFlight = await store.claim({ owner: 'v17#2', batchSize: 5, leaseMs: 60_000 });
    expect(inFlight).toHaveLength(5);
    const pendingHead = async (aggregate: string) =>
      (
        await db.pool.query<{ id: string }>(
          `SELECT id::text FROM outbox WHERE aggregate_id = $1 AND dispatched_at IS NULL
           ORDER BY sequence LIMIT 1`,
          [aggregate],
        )
      ).rows[0]!.id;
    const dead = await pendingHead('agg-25');
    await db.pool.query(
      `UPDATE outbox SET dead_lettered_at = now(), last_error = 'poison' WHERE id = $1`,
      [dead],
    );

    await migrate(executor);
    expect(
      await count(`SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NOT NULL`),
    ).toBe(10);
    const settled = await store.settle(
      'v17#2',
      inFlight.map((m) => ({ rowId: m.rowId!, kind: 'published' as const })),
      { deadLettersBlock: true, leaseMs: 30_000 },
    );
    expect(settled.settled).toHaveLength(5);
    // The old lease's batch went to the ring (in batches since migration 021); what version 17
    // dispatched is still where it was.
    expect(
      await count(
        `SELECT coalesce(sum(message_count), 0)::int AS n FROM outbox_dispatched_batch_0`,
      ),
    ).toBe(5);
    expect(
      await count(`SELECT count(*)::int AS n FROM outbox_messages WHERE dispatched_at IS NOT NULL`),
    ).toBe(15);
    for (const m of inFlight) before.add(m.id);

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
      const everything = [...chains, ...after, ...held].filter((m) => !before.has(m.messageId));
      const blocked = (m: { aggregateId: string }) =>
        m.aggregateId === 'held' || m.aggregateId === 'agg-25';
      await expect
        .poll(() => everything.filter((m) => !blocked(m)).every((m) => got(m.messageId)), {
          timeout: 60_000,
        })
        .toBe(true);
      expect(everything.filter(blocked).some((m) => got(m.messageId))).toBe(false);
      await replayDeadLetters(executor, { ids: [dead] });
      await approveMessages(executor, [held[0]!.id], { by: 'upgrade test' });
      await expect
        .poll(() => everything.every((m) => got(m.messageId)), { timeout: 60_000 })
        .toBe(true);
      const report = checkHistory(expectedOf(everything), receiver.events);
      expect(report.lost).toEqual([]);
      expect(report.orderViolations).toEqual([]);
      expect(report.concurrentDuplicates).toEqual([]);
    } finally {
      for (const d of dispatchers) d.child.kill('SIGTERM');
      for (const d of dispatchers) await d.exited;
    }
    // Every message is dispatched exactly once across the two places, and nothing is pending.
    const total = chains.length + held.length + after.length;
    expect(await count(`SELECT count(*)::int AS n FROM outbox`)).toBe(10);
    expect(
      await count(
        `SELECT count(DISTINCT message_id)::int AS n FROM outbox_messages WHERE dispatched_at IS NOT NULL`,
      ),
    ).toBe(total);
    expect(await count(`SELECT count(*)::int AS n FROM outbox_messages`)).toBe(total);
    // Retention takes both: the old rows by rows, the ring by TRUNCATE.
    expect((await pruneOutbox(executor, { olderThanMs: 0 })).removed).toBe(total);
    expect(await count(`SELECT count(*)::int AS n FROM outbox_messages`)).toBe(0);
  }, 180_000);
});
