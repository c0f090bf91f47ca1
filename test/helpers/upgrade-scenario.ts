import { expect } from 'vitest';
import {
  approveMessages,
  fromPg,
  migrate,
  MIGRATIONS,
  PgOutboxStore,
  replayDeadLetters,
  type OutgoingMessage,
  type SqlExecutor,
} from '../../src/index.js';
import { pruneOutbox } from '../../src/retention/prune-outbox.js';
import { startCli } from './cli-process.js';
import type { TestDatabase } from './database.js';
import { checkHistory, expectedOf } from './history.js';
import { enqueueCommitted, manyMessages } from './outbox-fixtures.js';
import type { WebhookReceiver } from './webhook-receiver.js';

/** What {@link runUpgradeScenario} hands the test's own checks after the migration. */
export interface AfterMigration {
  executor: SqlExecutor;
  /** The ten heads the old version dispatched. */
  first: OutgoingMessage[];
  /** The five messages leased by the old version, settled after the migration. */
  inFlight: OutgoingMessage[];
  count: (sql: string) => Promise<number>;
}

/**
 * A migration on an outbox in use, the same story for every upgrade test that settles: at version
 * `from` (the schema after `MIGRATIONS.slice(0, from)`), chains half dispatched by that version's
 * settle, a head dead-lettered under hold, a held head waiting for approval, and a batch
 * mid-lease whose settle comes only after the migration (a dispatcher of the old version
 * finishing its batch: it calls the same function, which the migration re-created). `afterMigration`
 * checks where things are. Then two dispatcher processes side by side deliver the rest: nothing
 * lost, nothing overtaking within an aggregate, nothing in flight twice. At the end
 * `leftInOutbox` rows are still in `outbox` (dispatched rows an old settle left there), every
 * message is in `outbox_messages` once, and a prune with a cut-off of 0 removes them all.
 */
export async function runUpgradeScenario(
  db: TestDatabase,
  receiver: WebhookReceiver,
  options: {
    from: number;
    afterMigration: (state: AfterMigration) => Promise<void>;
    leftInOutbox: number;
  },
): Promise<void> {
  const count = async (sql: string) => (await db.pool.query<{ n: number }>(sql)).rows[0]!.n;
  const executor = fromPg(db.pool);
  const old = `v${options.from}`;
  await migrate(executor, { migrations: MIGRATIONS.slice(0, options.from) });
  const chains = await enqueueCommitted(db.pool, manyMessages(30, 4));
  const held = await enqueueCommitted(db.pool, [
    { topic: 'payment.refund', aggregateId: 'held', payload: { n: 1 }, requiresApproval: true },
    { topic: 'payment.refund', aggregateId: 'held', payload: { n: 2 } },
  ]);
  const store = new PgOutboxStore(executor);
  const first = await store.claim({ owner: `${old}#1`, batchSize: 10, leaseMs: 30_000 });
  await store.settle(
    `${old}#1`,
    first.map((m) => ({ rowId: m.rowId!, kind: 'published' as const })),
    { deadLettersBlock: true, leaseMs: 30_000 },
  );
  expect(first).toHaveLength(10);
  const before = new Set(first.map((m) => m.id));
  const inFlight = await store.claim({ owner: `${old}#2`, batchSize: 5, leaseMs: 60_000 });
  expect(inFlight).toHaveLength(5);
  const dead = (
    await db.pool.query<{ id: string }>(
      `SELECT id::text FROM outbox WHERE aggregate_id = 'agg-25' AND dispatched_at IS NULL
       ORDER BY sequence LIMIT 1`,
    )
  ).rows[0]!.id;
  await db.pool.query(
    `UPDATE outbox SET dead_lettered_at = now(), last_error = 'poison' WHERE id = $1`,
    [dead],
  );

  await migrate(executor);
  const settled = await store.settle(
    `${old}#2`,
    inFlight.map((m) => ({ rowId: m.rowId!, kind: 'published' as const })),
    { deadLettersBlock: true, leaseMs: 30_000 },
  );
  expect(settled.settled).toHaveLength(5);
  await options.afterMigration({ executor, first, inFlight, count });
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
  // Every message is dispatched exactly once, wherever it was kept, and nothing is pending.
  const total = chains.length + held.length + after.length;
  expect(await count(`SELECT count(*)::int AS n FROM outbox`)).toBe(options.leftInOutbox);
  expect(
    await count(
      `SELECT count(DISTINCT message_id)::int AS n FROM outbox_messages WHERE dispatched_at IS NOT NULL`,
    ),
  ).toBe(total);
  expect(await count(`SELECT count(*)::int AS n FROM outbox_messages`)).toBe(total);
  expect((await pruneOutbox(executor, { olderThanMs: 0 })).removed).toBe(total);
  expect(await count(`SELECT count(*)::int AS n FROM outbox_messages`)).toBe(0);
}
