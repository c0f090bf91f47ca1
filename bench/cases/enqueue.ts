import type pg from 'pg';
import { randomUUID } from 'node:crypto';
import {
  createDispatcher,
  createOutbox,
  fromPg,
  type Dispatcher,
  type OutboxMessage,
  type Publisher,
} from '../../src/index.js';
import { createListenNotifyWakeSource } from '../../src/dispatcher/wake/listen-notify.js';
import type { BenchDatabase } from '../lib/database.js';
import { resetOutbox } from '../lib/database.js';
import { log, median, round, sleep } from '../lib/measure.js';

const outbox = createOutbox();

/** Publishes nothing, instantly: the bench measures the outbox, not a broker. */
export const noopPublisher: Publisher = {
  publish: async (messages) => messages.map(() => ({ status: 'published' as const })),
};

/**
 * How the outbox part of the business transaction is written:
 * - `none`: no outbox (the baseline);
 * - `writer`: our writer, 2 messages (what `enqueue_overhead` measures);
 * - `roundTrip`: one extra `SELECT` instead: the cost of any extra statement (the floor of
 *   "at most one extra round trip");
 * - `rowsOnly`: the same 2 rows as a prepared multi-VALUES INSERT into the outbox with its
 *   triggers off and sequences given: the rows and their indexes, nothing else;
 * - `rowsWithTriggers`: that INSERT with the triggers on (the sequence counter and the wake
 *   check), no writer; measured once more with the wake trigger off (`rowsWithCounter`);
 * - `heapOnly`: the same INSERT into a copy of the outbox with its columns, defaults and checks
 *   but no index and no trigger: what writing two such rows costs at all.
 * The last four are details that show where enqueue_overhead's cost goes.
 */
type EnqueueVariant =
  'none' | 'writer' | 'roundTrip' | 'rowsOnly' | 'rowsWithTriggers' | 'heapOnly';

const ROWS_SQL = `INSERT INTO outbox (aggregate_id, topic, payload, sequence)
  VALUES ($1, 'payment.charge', $2, $4), ($1, 'mail.send', $3, $5)`;

/** The two messages of the business transaction of order `id` (a charge and a receipt). */
export const orderMessages = (id: string): OutboxMessage[] => [
  { topic: 'payment.charge', aggregateId: `order:${id}`, payload: { orderId: id, total: 99.5 } },
  { topic: 'mail.send', aggregateId: `order:${id}`, payload: { orderId: id, template: 'receipt' } },
];

async function businessTransaction(client: pg.Client, variant: EnqueueVariant): Promise<void> {
  await client.query('BEGIN');
  const order = await client.query<{ id: string }>(
    `INSERT INTO bench_orders (customer, total) VALUES ($1, $2) RETURNING id`,
    ['customer-42', 99.5],
  );
  const id = order.rows[0]!.id;
  if (variant === 'writer') {
    await outbox.enqueue(fromPg(client), orderMessages(id));
  } else if (variant === 'roundTrip') {
    await client.query({ name: 'bench_round_trip', text: 'SELECT $1::bigint', values: [id] });
  } else if (variant === 'rowsOnly' || variant === 'rowsWithTriggers' || variant === 'heapOnly') {
    const heap = variant === 'heapOnly';
    await client.query({
      name: heap ? 'bench_rows_heap' : 'bench_rows',
      text: heap ? ROWS_SQL.replace('INTO outbox', 'INTO bench_outbox_heap') : ROWS_SQL,
      values: [
        `order:${id}`,
        { orderId: id, total: 99.5 },
        { orderId: id, template: 'receipt' },
        1,
        2,
      ],
    });
  }
  await client.query('COMMIT');
}

/**
 * `enqueue_overhead`: a business transaction (order row + 2 outbox messages through the writer)
 * vs the same transaction without the outbox, 1 client. The variants run in interleaved blocks
 * of 100 transactions and each figure is the MEDIAN block: with blocks of 250 and sums, one
 * checkpoint or autovacuum pass landing in some variant's block reordered the floors (a full run
 * measured the counter alone above the counter plus the wake check, and the writer faster with
 * its wake trigger than without).
 */
export async function enqueueOverhead(db: BenchDatabase, transactions: number) {
  await db.pool.query(
    `CREATE TABLE IF NOT EXISTS bench_orders (id bigserial PRIMARY KEY, customer text NOT NULL, total numeric NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`,
  );
  await db.pool.query(
    `CREATE TABLE IF NOT EXISTS bench_outbox_heap (LIKE outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`,
  );
  await resetOutbox(db.pool);
  const client = await db.client();
  const block = 100;
  const blocks = {
    none: [] as number[],
    writer: [] as number[],
    noTrigger: [] as number[],
    roundTrip: [] as number[],
    rowsOnly: [] as number[],
    rowsWithTriggers: [] as number[],
    rowsWithCounter: [] as number[],
    heapOnly: [] as number[],
  };
  const timeBlock = async (into: number[], variant: EnqueueVariant) => {
    const started = performance.now();
    for (let i = 0; i < block; i++) await businessTransaction(client, variant);
    into.push(performance.now() - started);
  };
  try {
    for (let i = 0; i < 100; i++) await businessTransaction(client, i % 2 ? 'none' : 'writer'); // warm-up
    for (let done = 0; done < transactions; done += block) {
      await timeBlock(blocks.none, 'none');
      await timeBlock(blocks.writer, 'writer');
      await timeBlock(blocks.roundTrip, 'roundTrip');
      await timeBlock(blocks.rowsWithTriggers, 'rowsWithTriggers');
      // The same with migration 005's wake trigger off, to isolate what it costs producers.
      await client.query('ALTER TABLE outbox DISABLE TRIGGER outbox_wake_waiters');
      await timeBlock(blocks.noTrigger, 'writer');
      await timeBlock(blocks.rowsWithCounter, 'rowsWithTriggers');
      await timeBlock(blocks.heapOnly, 'heapOnly');
      await client.query('ALTER TABLE outbox DISABLE TRIGGER USER');
      await timeBlock(blocks.rowsOnly, 'rowsOnly');
      await client.query('ALTER TABLE outbox ENABLE TRIGGER USER');
    }
  } finally {
    await client.end();
  }
  const ms = Object.fromEntries(
    Object.entries(blocks).map(([variant, times]) => [variant, median(times)]),
  ) as Record<keyof typeof blocks, number>;
  log(
    `enqueue: ${round(ms.writer / block, 3)} ms/tx with outbox, ${round(ms.none / block, 3)} without (median blocks)`,
  );
  return {
    ratio: round(ms.writer / ms.none, 3),
    wakeTriggerRatio: round(ms.writer / ms.noTrigger, 3),
    withOutboxMsPerTx: round(ms.writer / block, 3),
    withoutOutboxMsPerTx: round(ms.none / block, 3),
    blocks: blocks.none.length,
    floor: {
      oneExtraRoundTrip: round(ms.roundTrip / ms.none, 3),
      rowsWithoutIndexes: round(ms.heapOnly / ms.none, 3),
      rowsAndIndexesOnly: round(ms.rowsOnly / ms.none, 3),
      rowsWithCounter: round(ms.rowsWithCounter / ms.none, 3),
      rowsWithTriggers: round(ms.rowsWithTriggers / ms.none, 3),
    },
  };
}

type NotifyMode = 'off' | 'on' | 'unconditional' | 'armed';

/** 8 clients enqueueing one message per transaction for `seconds`; returns transactions/s. */
async function enqueueRate(db: BenchDatabase, seconds: number, clients: number): Promise<number> {
  const connections = await Promise.all(Array.from({ length: clients }, () => db.client()));
  let count = 0;
  const deadline = performance.now() + seconds * 1000;
  await Promise.all(
    connections.map(async (client) => {
      while (performance.now() < deadline) {
        await client.query('BEGIN');
        await outbox.enqueue(fromPg(client), {
          topic: 'mail.send',
          aggregateId: randomUUID(), // no sequence-lock contention: measure NOTIFY, not ordering
          payload: { n: count },
        });
        await client.query('COMMIT');
        count++;
      }
    }),
  );
  await Promise.all(connections.map((c) => c.end()));
  return count / seconds;
}

/**
 * Enqueue throughput at 8 clients while a dispatcher drains the table:
 * - `off`: polling dispatcher, no wake-ups (no waiter rows: the trigger only probes);
 * - `on`: the same dispatcher with the LISTEN/NOTIFY wake source (our conditional NOTIFY);
 * - `unconditional`: `off` plus a trigger that NOTIFYs in every transaction (pg-boss style);
 * - `armed`: a waiter row that never goes away (every transaction notifies: our worst case,
 *   e.g. a dispatcher that is idle-armed while a burst starts).
 */
export async function notifyCost(db: BenchDatabase, seconds: number) {
  await db.pool.query(`
    CREATE OR REPLACE FUNCTION bench_always_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN PERFORM pg_notify('bench_always', ''); RETURN NULL; END $$`);
  await db.pool.query(`DROP TRIGGER IF EXISTS bench_always_notify ON outbox`);
  await db.pool.query(`
    CREATE TRIGGER bench_always_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION bench_always_notify()`);
  await db.pool.query(`ALTER TABLE outbox DISABLE TRIGGER bench_always_notify`);
  const rates: Record<NotifyMode, number[]> = { off: [], on: [], unconditional: [], armed: [] };
  const order: NotifyMode[] = ['off', 'on', 'unconditional', 'armed', 'off', 'on'];
  for (const mode of order) {
    await resetOutbox(db.pool);
    // Every mode drains with the same polling dispatcher, so the load besides NOTIFY is equal.
    const dispatcher: Dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher: noopPublisher,
      unorderedTopics: ['mail.*'],
      pollIntervalMs: mode === 'on' ? 5_000 : 1_000,
      ...(mode === 'on' && {
        wakeSource: createListenNotifyWakeSource({ connect: () => db.client() }),
      }),
    });
    dispatcher.start();
    await sleep(300);
    if (mode === 'armed') {
      await db.pool.query(
        `INSERT INTO outbox_waiters VALUES ('bench-armed', clock_timestamp() + interval '1 hour')`,
      );
    }
    if (mode === 'unconditional')
      await db.pool.query(`ALTER TABLE outbox ENABLE TRIGGER bench_always_notify`);
    const rate = await enqueueRate(db, seconds, 8);
    rates[mode].push(rate);
    log(`enqueue at 8 clients, notify ${mode}: ${Math.round(rate)} tx/s`);
    await db.pool.query(`ALTER TABLE outbox DISABLE TRIGGER bench_always_notify`);
    await dispatcher.stop();
  }
  await db.pool.query(`DROP TRIGGER bench_always_notify ON outbox`);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const off = mean(rates.off);
  return {
    notifyEnqueueRatio: round(mean(rates.on) / off, 3),
    unconditionalRatio: round(mean(rates.unconditional) / off, 3),
    armedRatio: round(mean(rates.armed) / off, 3),
    txPerSecond: {
      off: Math.round(off),
      on: Math.round(mean(rates.on)),
      unconditional: Math.round(mean(rates.unconditional)),
      armed: Math.round(mean(rates.armed)),
    },
  };
}
