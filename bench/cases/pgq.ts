import type pg from 'pg';
import {
  createDispatcher,
  createLaneDispatcher,
  createOutbox,
  fromPg,
  pruneOutbox,
  type OutboxMessage,
} from '../../src/index.js';
import type { BenchDatabase } from '../lib/database.js';
import { cpuSample, cpuSince, type CpuSpent } from '../lib/cpu.js';
import { log, median, round, timed } from '../lib/measure.js';
import { rate } from './dispatch.js';
import { noopPublisher, orderMessages } from './enqueue.js';
import { lsn, walBytes, walPerMessage, walRecords } from './wal-per-message.js';

/**
 * Issue 43: PgQ 3.5 (skytools, Debian `postgresql-15-pgq3`) beside our dispatcher, on the same
 * server, in databases created for the case, driven from `pg` as a consumer written with its SQL
 * API would be: one consumer, `pgq.next_batch` / `pgq.get_batch_events` / `pgq.finish_batch`, a
 * no-op "publisher" (nothing done per event), batches of 500.
 *
 * The ticker is the bench itself: events are inserted in transactions of 500 and `pgq.ticker(queue)`
 * is called after each (PgQ's default `ticker_max_count` is 500, so each call makes a tick), so
 * every batch holds 500 events, like our claims of 500. During the enqueue case a timer calls
 * `pgq.ticker()` every second (pgqd's default `ticker_period`). No ticker runs during a timed
 * drain: every event is already in a ticked batch, as the peers' jobs are inserted beforehand.
 *
 * What PgQ does not guarantee, and ours does (SPEC G3, G4, G6, G9): no per-message retry state (a
 * batch is all or nothing; `event_retry` re-inserts an event into a later batch), no order per
 * aggregate under retry (a retried event comes after its successors), one consumer per batch
 * (consumers of one name do not share a queue's batches), and a batch is only as fresh as the
 * last tick (latency ≥ the tick period).
 *
 * Our side of every key is the LANES engine (migration 024: `createOutbox({ engine: 'lanes' })`
 * writing `outbox_lane_messages`, `createLaneDispatcher` with batches of 500). The claim engine
 * (`createOutbox()` + `createDispatcher`) is measured in the same run as before and kept in each
 * key's `details` under `claims`, so the two engines and PgQ are read in one run. The lanes
 * engine has every feature of the claim engine (dedupe keys, delays, shadow messages, approvals,
 * tenants' fair shares, route pauses and rate limits, retention, fleet mode, plain-SQL enqueue,
 * Skip); none of them is used in these cases.
 *
 * Keys:
 * - `dispatch_vs_pgq`: the lower of our unordered (`ordered: false`, one aggregate a message) and
 *   ordered (`payment.charge`, 500 aggregates) drains of `count` lane messages (written by the
 *   lanes writer in transactions of 500, then VACUUM ANALYZE and a CHECKPOINT as PgQ's drain
 *   gets; timed around `createLaneDispatcher(...).drain()`, no-op publisher, batch 500,
 *   `concurrency: 2`: {@link LANE_CONCURRENCY}) over PgQ's drain of `count` events. Best of
 *   `rounds` alternated runs each. The same with one batch in flight in
 *   `details.oneBatchInFlight`; the claim engine's drains (dispatch.ts's `rate`, batch 500) in
 *   `details.claims`. The CPU of each side's best drain per message, this Node process's and
 *   the server's, in `details.cpuPerMessageUs` (bench/lib/cpu.ts): which of the two bounds it.
 * - `held_snapshot_vs_pgq`: the same after `heldHistory` messages (on each engine) and
 *   `heldHistory` events were processed under a REPEATABLE READ snapshot held on another
 *   connection of the same database (ours by one dispatcher per engine that keeps running, as
 *   `outbox dispatch` would; no TRUNCATE, which would remove the dead rows the case is about).
 * - `enqueue_vs_pgq`: the business transaction (an order row and two messages, one round trip
 *   for them) with the lanes writer over the same with two `pgq.insert_event` calls in one
 *   statement: ratio of times (median blocks of 100, interleaved with the bare transaction and
 *   the claim engine's writer).
 * - `dispatch_wal_per_message_ratio`: the WAL the lanes dispatcher writes per message (batch 500)
 *   over the WAL the lanes writer wrote for it (one message per transaction, ordered topic, one
 *   aggregate each), on a database of its own. The claim engine's (wal-per-message.ts, claim +
 *   settle) and PgQ's bytes per event beside it in `details`.
 */

/** The queue of every PgQ case (and of bench/prototypes/cursor-lanes.ts). */
export const QUEUE = 'bench_queue';
const CONSUMER = 'bench_consumer';
const BATCH = 500;
/** pgqd's default ticker_period: the timer ticker of the enqueue case. */
const TICK_PERIOD_MS = 1_000;

/** The counts of a quick and a full run (kept here, beside the case). */
export const PGQ_SIZE = {
  quick: { count: 20_000, rounds: 1, heldHistory: 50_000, enqueueTx: 500, walMessages: 2_000 },
  full: { count: 50_000, rounds: 2, heldHistory: 200_000, enqueueTx: 2_000, walMessages: 5_000 },
};
type PgqSize = (typeof PGQ_SIZE)['full'];

/**
 * Why PgQ cannot be measured on this server (its extension is not installed), or undefined.
 * `apt-get install -y postgresql-15-pgq3` installs it (.ci/run does).
 */
export async function pgqMissing(db: BenchDatabase): Promise<string | undefined> {
  const { rows } = await db.pool.query<{ version: string | null }>(
    `SELECT (SELECT default_version FROM pg_available_extensions WHERE name = 'pgq') AS version`,
  );
  return rows[0]?.version
    ? undefined
    : 'the pgq extension is not installed on this server (apt-get install -y postgresql-15-pgq3)';
}

/** The extension, one queue and its one consumer (registered first: it sees what follows). */
export async function createQueue(db: BenchDatabase): Promise<string> {
  await db.pool.query('CREATE EXTENSION IF NOT EXISTS pgq');
  await db.pool.query(
    `SELECT pgq.create_queue($1) WHERE NOT EXISTS (SELECT 1 FROM pgq.queue WHERE queue_name = $1)`,
    [QUEUE],
  );
  await db.pool.query(`SELECT pgq.register_consumer($1, $2)`, [QUEUE, CONSUMER]);
  const { rows } = await db.pool.query<{ version: string }>(`SELECT pgq.version() AS version`);
  return rows[0]!.version;
}

/**
 * `count` events in transactions of {@link BATCH} (one statement each, as seedPending writes our
 * backlog), each followed by a tick: one batch per transaction.
 */
export async function insertEvents(db: BenchDatabase, count: number): Promise<void> {
  const client = await db.pool.connect();
  try {
    for (let done = 0; done < count; done += BATCH) {
      const n = Math.min(BATCH, count - done);
      await client.query(
        `SELECT count(pgq.insert_event($1, 'mail.send', json_build_object('n', g)::text))
         FROM generate_series(1, $2::int) g`,
        [QUEUE, n],
      );
      await tick(client);
    }
    // The tick that closes a short last transaction (fewer events than ticker_max_count).
    await client.query(`SELECT pgq.force_tick($1)`, [QUEUE]);
    await tick(client);
  } finally {
    client.release();
  }
}

const tick = (client: pg.PoolClient | pg.Pool) =>
  client.query(`SELECT pgq.ticker($1::text)`, [QUEUE]);

/** What a PgQ drain did: events, batches, and the largest batch. */
interface PgqDrain {
  events: number;
  batches: number;
  largestBatch: number;
  ms: number;
  /** CPU of the drain, this process's and the server's (bench/lib/cpu.ts). */
  cpu?: CpuSpent;
}

/**
 * One consumer takes every ticked batch: next_batch, get_batch_events, the no-op publisher,
 * finish_batch, each in its own transaction (autocommit), until next_batch says there is none.
 * Timed from the first next_batch.
 */
export async function drainPgq(db: BenchDatabase): Promise<PgqDrain> {
  const client = await db.client();
  const result: PgqDrain = { events: 0, batches: 0, largestBatch: 0, ms: 0 };
  try {
    const cpu = await cpuSample(db);
    result.ms = await timed(async () => {
      for (;;) {
        const next = await client.query<{ id: string | null }>(
          `SELECT pgq.next_batch($1, $2)::text AS id`,
          [QUEUE, CONSUMER],
        );
        const batch = next.rows[0]?.id;
        if (!batch) return;
        const events = await client.query<{ ev_id: string; ev_type: string; ev_data: string }>(
          `SELECT ev_id, ev_type, ev_data FROM pgq.get_batch_events($1::bigint)`,
          [batch],
        );
        await publishNothing(events.rows);
        await client.query(`SELECT pgq.finish_batch($1::bigint)`, [batch]);
        result.events += events.rows.length;
        result.batches++;
        result.largestBatch = Math.max(result.largestBatch, events.rows.length);
      }
    });
    result.cpu = await cpuSince(db, cpu);
  } finally {
    await client.end();
  }
  return result;
}

/** PgQ's side of the no-op publisher: an awaited call that does nothing per event. */
const publishNothing = async (events: readonly unknown[]) => events.map(() => 'published');

/** PgQ events/s of one drain of `count` events inserted and ticked beforehand. */
export async function pgqRate(
  db: BenchDatabase,
  count: number,
): Promise<PgqDrain & { perSecond: number }> {
  await insertEvents(db, count);
  await db.pool.query('CHECKPOINT');
  const drained = await drainPgq(db);
  if (drained.events !== count) throw new Error(`bench: PgQ drained ${drained.events} of ${count}`);
  return { ...drained, perSecond: (count / drained.ms) * 1000 };
}

/** The lanes engine's writer (migration 024). */
const laneOutbox = createOutbox({ engine: 'lanes' });

/**
 * `count` messages through the lanes writer, in transactions of {@link BATCH} messages (one
 * enqueue call each), as PgQ's events are inserted. Ordered: `payment.charge` on 500 aggregates;
 * unordered: `mail.send` with `ordered: false`, one aggregate a message. Aggregate names start at
 * a stamp, so that drains that keep what is there (under the held snapshot) add new aggregates.
 */
async function writeLaneMessages(db: BenchDatabase, count: number, ordered: boolean) {
  const stamp = Date.now() % 1_000_000_000;
  const client = await db.pool.connect();
  try {
    for (let done = 0; done < count; done += BATCH) {
      const messages: OutboxMessage[] = Array.from(
        { length: Math.min(BATCH, count - done) },
        (_, i) => {
          const g = done + i + 1;
          return ordered
            ? {
                topic: 'payment.charge',
                aggregateId: `agg-${stamp + (g % 500)}`,
                payload: { n: g },
              }
            : {
                topic: 'mail.send',
                aggregateId: `agg-${stamp + g}`,
                payload: { n: g },
                ordered: false,
              };
        },
      );
      await client.query('BEGIN');
      await laneOutbox.enqueue(fromPg(client), messages);
      await client.query('COMMIT');
    }
  } finally {
    client.release();
  }
}

/**
 * Batches in flight on the lanes side of the headline figures: `concurrency: 2` (two lane
 * dispatchers on eight lanes each, lane-dispatcher-group.ts), as docs/lanes.md advises for
 * throughput. One batch in flight is measured beside it in `dispatch_vs_pgq` (details). PgQ's
 * consumer takes its batches one after the other: a queue's batches are sequential by design.
 */
const LANE_CONCURRENCY = 2;

const laneDispatcher = (db: BenchDatabase, concurrency = LANE_CONCURRENCY) =>
  createLaneDispatcher({
    executor: fromPg(db.pool),
    publisher: noopPublisher,
    batchSize: BATCH,
    concurrency,
  });

/**
 * Messages/s of one lanes drain of `count` new messages: written, VACUUM ANALYZE (as seedPending
 * does for the claim engine), a CHECKPOINT (as PgQ's drain gets), then `dispatcher.drain()` timed.
 * `reset` empties the messages first (the cursors go on: ids keep growing); under the held
 * snapshot nothing is emptied.
 */
async function laneRate(
  db: BenchDatabase,
  dispatcher: ReturnType<typeof laneDispatcher>,
  count: number,
  ordered: boolean,
  reset: boolean,
): Promise<number> {
  return (await laneDrain(db, dispatcher, count, ordered, reset)).perSecond;
}

/** {@link laneRate} with the drain's CPU (bench/lib/cpu.ts). */
async function laneDrain(
  db: BenchDatabase,
  dispatcher: ReturnType<typeof laneDispatcher>,
  count: number,
  ordered: boolean,
  reset: boolean,
): Promise<{ perSecond: number; cpu: CpuSpent }> {
  if (reset) await db.pool.query('TRUNCATE outbox_lane_messages, outbox_lane_parked');
  await writeLaneMessages(db, count, ordered);
  await db.pool.query('VACUUM ANALYZE outbox_lane_messages');
  await db.pool.query('CHECKPOINT');
  let published = 0;
  const before = await cpuSample(db);
  const ms = await timed(async () => {
    published = (await dispatcher.drain()).published;
  });
  const cpu = await cpuSince(db, before);
  if (published !== count) throw new Error(`bench: lanes drained ${published} of ${count}`);
  return { perSecond: (count / ms) * 1000, cpu };
}

/** `dispatch_vs_pgq`: alternated drains, best of `rounds` each. */
export async function dispatchVsPgq(db: BenchDatabase, size: PgqSize) {
  const version = await createQueue(db);
  const best = { unordered: 0, ordered: 0, pgq: 0, claimsUnordered: 0, claimsOrdered: 0 };
  const single = { unordered: 0, ordered: 0 };
  // The CPU of each side's best drain, per message (bench/lib/cpu.ts).
  const cpu: Partial<Record<Side, CpuSpent>> = {};
  let last: PgqDrain | undefined;
  for (let r = 0; r < size.rounds; r++) {
    const lanes = laneDispatcher(db);
    const one = laneDispatcher(db, 1);
    const unordered = await laneDrain(db, lanes, size.count, false, true);
    keepBest(best, cpu, 'unordered', unordered);
    single.unordered = Math.max(single.unordered, await laneRate(db, one, size.count, false, true));
    const pgq = await pgqRate(db, size.count);
    last = pgq;
    keepBest(best, cpu, 'pgq', pgq);
    const ordered = await laneDrain(db, lanes, size.count, true, true);
    keepBest(best, cpu, 'ordered', ordered);
    single.ordered = Math.max(single.ordered, await laneRate(db, one, size.count, true, true));
    best.claimsUnordered = Math.max(
      best.claimsUnordered,
      await rate(db, 'ours', size.count, false, BATCH),
    );
    best.claimsOrdered = Math.max(
      best.claimsOrdered,
      await rate(db, 'ours', size.count, true, BATCH),
    );
  }
  const ours = Math.min(best.unordered, best.ordered);
  const claims = Math.min(best.claimsUnordered, best.claimsOrdered);
  log(
    `PgQ ${version}: ${Math.round(best.pgq)} events/s; lanes (concurrency ${LANE_CONCURRENCY}) ${Math.round(best.unordered)} unordered, ${Math.round(best.ordered)} ordered msg/s, one batch in flight ${Math.round(single.unordered)} / ${Math.round(single.ordered)}; claims ${Math.round(best.claimsUnordered)} / ${Math.round(best.claimsOrdered)} (batch ${BATCH}); CPU µs a message, node/server/autovacuum: ${cpuText(cpu.unordered, size.count)} unordered, ${cpuText(cpu.ordered, size.count)} ordered, PgQ ${cpuText(cpu.pgq, size.count)}`,
  );
  return {
    ratio: round(ours / best.pgq),
    engine: 'lanes',
    concurrency: LANE_CONCURRENCY,
    pgqVersion: version,
    perSecond: {
      oursUnordered: Math.round(best.unordered),
      oursOrdered: Math.round(best.ordered),
      pgq: Math.round(best.pgq),
    },
    oneBatchInFlight: {
      ratio: round(Math.min(single.unordered, single.ordered) / best.pgq),
      perSecond: { unordered: Math.round(single.unordered), ordered: Math.round(single.ordered) },
    },
    claims: {
      ratio: round(claims / best.pgq),
      perSecond: {
        unordered: Math.round(best.claimsUnordered),
        ordered: Math.round(best.claimsOrdered),
      },
    },
    pgqBatches: last && { batches: last.batches, largest: last.largestBatch },
    cpuPerMessageUs: {
      note: 'CPU of each best drain over its messages, µs: this Node process, the client backends of the bench database, its background workers (autovacuum) (bench/lib/cpu.ts)',
      oursUnordered: cpuPerMessage(cpu.unordered, size.count),
      oursOrdered: cpuPerMessage(cpu.ordered, size.count),
      pgq: cpuPerMessage(cpu.pgq, size.count),
    },
    count: size.count,
    rounds: size.rounds,
  };
}

type Side = 'unordered' | 'ordered' | 'pgq';

/** `drain` as `side`'s best, with its CPU, when it is faster than the best so far. */
function keepBest(
  best: Record<Side, number>,
  cpu: Partial<Record<Side, CpuSpent>>,
  side: Side,
  drain: { perSecond: number; cpu?: CpuSpent | undefined },
): void {
  if (drain.perSecond <= best[side]) return;
  best[side] = drain.perSecond;
  if (drain.cpu) cpu[side] = drain.cpu;
}

const cpuText = (cpu: CpuSpent | undefined, count: number) => {
  const us = cpuPerMessage(cpu, count);
  return us ? `${us.node}/${us.server ?? '?'}/${us.background ?? '?'}` : '?';
};

/** µs of CPU a message: Node's and the server's (undefined when /proc could not be read). */
function cpuPerMessage(cpu: CpuSpent | undefined, count: number) {
  if (!cpu) return undefined;
  const us = (ms: number | undefined) => (ms === undefined ? null : round((ms * 1000) / count));
  return { node: us(cpu.nodeMs), server: us(cpu.serverMs), background: us(cpu.backgroundMs) };
}

/** Inserts `count` pending messages without emptying the table (unlike seedPending's callers). */
async function insertPending(db: BenchDatabase, count: number, ordered: boolean): Promise<void> {
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload)
     SELECT 'agg-' || ($3::int + g % $4::int), $2, jsonb_build_object('n', g)
     FROM generate_series(1, $1::int) g ORDER BY g`,
    [
      count,
      ordered ? 'payment.charge' : 'mail.send',
      Date.now() % 1_000_000_000,
      ordered ? 500 : count,
    ],
  );
}

/**
 * `held_snapshot_vs_pgq`: each side's history (lanes, claims, PgQ), then alternated drains, under
 * one held snapshot.
 */
export async function heldSnapshotVsPgq(db: BenchDatabase, size: PgqSize) {
  await createQueue(db);
  const holder = await db.client();
  // The running dispatchers, as in held-snapshot.ts; the claim engine's declares mail.*
  // unordered before its first claim, so declare it before any message is written.
  const dispatcher = createDispatcher({
    executor: fromPg(db.pool),
    publisher: noopPublisher,
    batchSize: BATCH,
    unorderedTopics: ['mail.*'],
  });
  const lanes = laneDispatcher(db);
  const claimsDrain = async (count: number, ordered: boolean) => {
    await insertPending(db, count, ordered);
    let published = 0;
    const ms = await timed(async () => {
      published = (await dispatcher.drain()).published;
    });
    if (published !== count) throw new Error(`bench: drained ${published} of ${count}`);
    return (count / ms) * 1000;
  };
  try {
    await dispatcher.drain();
    await lanes.drain();
    await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await holder.query('SELECT count(*) FROM outbox');
    // The history: half ordered, half unordered, in chunks of 50,000, on each engine; the same
    // number of events.
    const chunk = 50_000;
    for (let done = 0, i = 0; done < size.heldHistory; done += chunk, i++)
      await laneRate(db, lanes, Math.min(chunk, size.heldHistory - done), i % 2 === 0, false);
    for (let done = 0, i = 0; done < size.heldHistory; done += chunk, i++)
      await claimsDrain(Math.min(chunk, size.heldHistory - done), i % 2 === 0);
    for (let done = 0; done < size.heldHistory; done += chunk) {
      await insertEvents(db, Math.min(chunk, size.heldHistory - done));
      await drainPgq(db);
    }
    log(`held snapshot vs PgQ: ${size.heldHistory.toLocaleString('en-US')} processed on each side`);
    const best = { unordered: 0, ordered: 0, pgq: 0, claimsUnordered: 0, claimsOrdered: 0 };
    const cpu: Partial<Record<Side, CpuSpent>> = {};
    for (let r = 0; r < size.rounds; r++) {
      const unordered = await laneDrain(db, lanes, size.count, false, false);
      keepBest(best, cpu, 'unordered', unordered);
      const pgq = await pgqRate(db, size.count);
      keepBest(best, cpu, 'pgq', pgq);
      const ordered = await laneDrain(db, lanes, size.count, true, false);
      keepBest(best, cpu, 'ordered', ordered);
      best.claimsUnordered = Math.max(best.claimsUnordered, await claimsDrain(size.count, false));
      best.claimsOrdered = Math.max(best.claimsOrdered, await claimsDrain(size.count, true));
    }
    const stillHeld = await holder.query<{ xmin: string | null }>(
      `SELECT backend_xmin::text AS xmin FROM pg_stat_activity WHERE pid = pg_backend_pid()`,
    );
    if (!stillHeld.rows[0]?.xmin) throw new Error('bench: the held snapshot was not held');
    const ours = Math.min(best.unordered, best.ordered);
    const claims = Math.min(best.claimsUnordered, best.claimsOrdered);
    log(
      `held snapshot vs PgQ: ${Math.round(best.pgq)} events/s; lanes ${Math.round(best.unordered)} unordered, ${Math.round(best.ordered)} ordered; claims ${Math.round(best.claimsUnordered)} / ${Math.round(best.claimsOrdered)}; CPU µs a message, node/server/autovacuum: ${cpuText(cpu.unordered, size.count)} unordered, ${cpuText(cpu.ordered, size.count)} ordered, PgQ ${cpuText(cpu.pgq, size.count)}`,
    );
    return {
      ratio: round(ours / best.pgq),
      engine: 'lanes',
      concurrency: LANE_CONCURRENCY,
      perSecond: {
        oursUnordered: Math.round(best.unordered),
        oursOrdered: Math.round(best.ordered),
        pgq: Math.round(best.pgq),
      },
      claims: {
        ratio: round(claims / best.pgq),
        perSecond: {
          unordered: Math.round(best.claimsUnordered),
          ordered: Math.round(best.claimsOrdered),
        },
      },
      cpuPerMessageUs: {
        oursUnordered: cpuPerMessage(cpu.unordered, size.count),
        oursOrdered: cpuPerMessage(cpu.ordered, size.count),
        pgq: cpuPerMessage(cpu.pgq, size.count),
      },
      history: size.heldHistory,
      count: size.count,
      rounds: size.rounds,
    };
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    await holder.end();
  }
}

const outbox = createOutbox();

/** The bare transaction, the lanes writer (the key), the claim engine's writer, PgQ. */
type EnqueueSide = 'none' | 'lanes' | 'claims' | 'pgq';
const ENQUEUE_SIDES = ['none', 'lanes', 'claims', 'pgq'] as const;

async function businessTransaction(client: pg.Client, side: EnqueueSide): Promise<void> {
  await client.query('BEGIN');
  const order = await client.query<{ id: string }>(
    `INSERT INTO bench_orders (customer, total) VALUES ($1, $2) RETURNING id`,
    ['customer-42', 99.5],
  );
  const id = order.rows[0]!.id;
  if (side === 'lanes') await laneOutbox.enqueue(fromPg(client), orderMessages(id));
  else if (side === 'claims') await outbox.enqueue(fromPg(client), orderMessages(id));
  else if (side === 'pgq') {
    const [charge, receipt] = orderMessages(id);
    // Both events in one statement: one round trip, as our writer sends both messages in one.
    await client.query({
      name: 'bench_pgq_events',
      text: `SELECT pgq.insert_event($1, $2, $3), pgq.insert_event($1, $4, $5)`,
      values: [
        QUEUE,
        charge!.topic,
        JSON.stringify(charge!.payload),
        receipt!.topic,
        JSON.stringify(receipt!.payload),
      ],
    });
  }
  await client.query('COMMIT');
}

/** `enqueue_vs_pgq`: interleaved blocks of 100 (none, lanes, claims, pgq), median block each. */
export async function enqueueVsPgq(db: BenchDatabase, size: PgqSize) {
  await createQueue(db);
  await db.pool.query(
    `CREATE TABLE IF NOT EXISTS bench_orders (id bigserial PRIMARY KEY, customer text NOT NULL, total numeric NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`,
  );
  const ticker = setInterval(() => void tick(db.pool).catch(() => undefined), TICK_PERIOD_MS);
  const client = await db.client();
  const block = 100;
  const blocks: Record<EnqueueSide, number[]> = { none: [], lanes: [], claims: [], pgq: [] };
  try {
    for (let i = 0; i < 200; i++)
      await businessTransaction(client, ENQUEUE_SIDES[i % ENQUEUE_SIDES.length]!); // warm-up
    for (let done = 0; done < size.enqueueTx; done += block) {
      for (const side of ENQUEUE_SIDES) {
        const started = performance.now();
        for (let i = 0; i < block; i++) await businessTransaction(client, side);
        blocks[side].push(performance.now() - started);
      }
    }
  } finally {
    clearInterval(ticker);
    await client.end();
  }
  const ms = {
    none: median(blocks.none) / block,
    lanes: median(blocks.lanes) / block,
    claims: median(blocks.claims) / block,
    pgq: median(blocks.pgq) / block,
  };
  log(
    `enqueue vs PgQ: ${round(ms.lanes, 3)} ms/tx lanes, ${round(ms.claims, 3)} claims, ${round(ms.pgq, 3)} PgQ, ${round(ms.none, 3)} bare`,
  );
  return {
    ratio: round(ms.lanes / ms.pgq),
    engine: 'lanes',
    msPerTx: { bare: round(ms.none, 3), ours: round(ms.lanes, 3), pgq: round(ms.pgq, 3) },
    // What each adds to the bare transaction, ours over PgQ's.
    overheadRatio: round((ms.lanes - ms.none) / (ms.pgq - ms.none)),
    claims: {
      ratio: round(ms.claims / ms.pgq),
      msPerTx: round(ms.claims, 3),
      overheadRatio: round((ms.claims - ms.none) / (ms.pgq - ms.none)),
    },
    blocks: blocks.none.length,
  };
}

/**
 * The lanes engine's WAL per message, the shape of wal-per-message.ts: `count` messages through
 * the lanes writer, one per transaction (ordered topic, one aggregate each), then drained by
 * `createLaneDispatcher` (batch {@link BATCH}, no-op publisher). Only this database's records.
 * The CHECKPOINT before the enqueue (as wal-per-message.ts) makes the drain's first write to the
 * lane rows and the owners table log their whole pages: a few pages a drain, counted in the key
 * (the ratio without them beside it). Then retention, as wal-per-message.ts measures it for the
 * claim engine's `wal_per_message_ratio` (a CHECKPOINT, then `pruneOutbox` of everything): its
 * WAL is `retention`, and `(dispatch + retention) / enqueue` is that key's ratio on the lanes
 * engine. Since migration 034 the prune compresses its own full-page images (lz4) when the
 * server has `wal_compression` off, as here; `uncompressedPrune` turns that off for the database
 * (`agent_outbox.prune_wal_compression = off`, set before its first pooled connection): the
 * figure before migration 034, measured in the same run.
 */
async function laneWal(db: BenchDatabase, count: number, uncompressedPrune = false) {
  if (uncompressedPrune) {
    const admin = await db.client();
    await admin.query(`ALTER DATABASE ${db.name} SET agent_outbox.prune_wal_compression = 'off'`);
    await admin.end();
  }
  await db.pool.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
  const compression = (
    await db.pool.query<{ c: string }>(`SELECT current_setting('wal_compression') AS c`)
  ).rows[0]!.c;
  const pin = await db.pool.connect();
  try {
    await pin.query(`SELECT pg_create_physical_replication_slot($1, true, true)`, [
      `ao_bench_lane_wal_${process.pid}`,
    ]);
    // A drain of nothing first: the first calls of the lane functions in a fresh database prune
    // the catalog pages the migrations left dead tuples in (pg_attribute, pg_proc: 18 kB of WAL,
    // 9 B a message at 2,000 in a quick run of 2026-12-06), a one-off of a new database.
    await laneDispatcher(db).drain();
    await db.pool.query('CHECKPOINT');
    const start = await lsn(db);
    const client = await db.pool.connect();
    try {
      for (let i = 0; i < count; i++) {
        await client.query('BEGIN');
        await laneOutbox.enqueue(fromPg(client), {
          topic: 'payment.charge',
          aggregateId: `wal-${i}`,
          payload: { orderId: i, total: 99.5 },
        });
        await client.query('COMMIT');
      }
    } finally {
      client.release();
    }
    const enqueued = await lsn(db);
    const drained = await laneDispatcher(db).drain();
    if (drained.published !== count)
      throw new Error(`bench: lanes drained ${drained.published} of ${count}`);
    const dispatched = await lsn(db);
    const records = {
      enqueue: await walRecords(db, start, enqueued, count),
      // Totals, not per message (a few records a batch: per message they round to 0).
      dispatchTotals: await walRecords(db, enqueued, dispatched, 1),
    };
    await db.pool.query('CHECKPOINT');
    const beforePrune = await lsn(db);
    const pruned = await pruneOutbox(fromPg(db.pool), { olderThanMs: 0 });
    if (pruned.removed !== count)
      throw new Error(`bench: lanes retention pruned ${pruned.removed} of ${count}`);
    const end = await lsn(db);
    const enqueue = await walBytes(db, start, enqueued);
    const dispatch = await walBytes(db, enqueued, dispatched);
    const retention = await walBytes(db, beforePrune, end);
    const perMessage = (w: { bytes: number; fpi: number }) => ({
      bytes: round(w.bytes / count, 1),
      fullPageImageBytes: round(w.fpi / count, 1),
    });
    return {
      walCompression: compression,
      perMessage: {
        enqueue: perMessage(enqueue),
        dispatch: perMessage(dispatch),
        retention: perMessage(retention),
      },
      /** `wal_per_message_ratio`'s definition on the lanes engine: dispatch and retention. */
      walPerMessageRatio: round((dispatch.bytes + retention.bytes) / enqueue.bytes, 3),
      walPerMessageRatioWithoutFullPageImages: round(
        (dispatch.bytes - dispatch.fpi + retention.bytes - retention.fpi) /
          (enqueue.bytes - enqueue.fpi),
        3,
      ),
      records,
    };
  } finally {
    pin.release(true);
  }
}

/**
 * PgQ's WAL per event for the same shape as wal-per-message.ts: `count` events, one per
 * transaction (ticked every 500), then consumed in batches of 500. Only this database's records.
 */
async function pgqWal(db: BenchDatabase, count: number) {
  await db.pool.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
  await createQueue(db);
  const pin = await db.pool.connect();
  try {
    await pin.query(`SELECT pg_create_physical_replication_slot($1, true, true)`, [
      `ao_bench_pgq_wal_${process.pid}`,
    ]);
    await db.pool.query('CHECKPOINT');
    const start = await lsn(db);
    const client = await db.pool.connect();
    try {
      for (let i = 0; i < count; i++) {
        await client.query(`SELECT pgq.insert_event($1, 'payment.charge', $2)`, [
          QUEUE,
          JSON.stringify({ orderId: i, total: 99.5 }),
        ]);
        if ((i + 1) % BATCH === 0) await tick(client);
      }
      await client.query(`SELECT pgq.force_tick($1)`, [QUEUE]);
      await tick(client);
    } finally {
      client.release();
    }
    const inserted = await lsn(db);
    const drained = await drainPgq(db);
    if (drained.events !== count) throw new Error(`bench: PgQ drained ${drained.events}`);
    const consumed = await lsn(db);
    const enqueue = await walBytes(db, start, inserted);
    const consume = await walBytes(db, inserted, consumed);
    return {
      enqueueBytes: Math.round(enqueue.bytes / count),
      consumeBytes: round(consume.bytes / count),
    };
  } finally {
    pin.release(true);
  }
}

/**
 * `dispatch_wal_per_message_ratio` (the lanes engine), the claim engine's beside it (on `claimsDb`,
 * as before) and PgQ's bytes per event.
 */
export async function dispatchWal(
  lanesDb: BenchDatabase,
  lanesUncompressedDb: BenchDatabase,
  claimsDb: BenchDatabase,
  pgq: BenchDatabase | null,
  size: PgqSize,
) {
  const lanes = await laneWal(lanesDb, size.walMessages);
  const uncompressed = await laneWal(lanesUncompressedDb, size.walMessages, true);
  log(
    `WAL per message, lanes with retention (wal_per_message_ratio's definition), wal_compression = ${lanes.walCompression}: ${lanes.walPerMessageRatio} (retention ${lanes.perMessage.retention.bytes} bytes, ${lanes.perMessage.retention.fullPageImageBytes} of them full-page images, compressed by the prune); with the prune's compression off: ${uncompressed.walPerMessageRatio} (retention ${uncompressed.perMessage.retention.bytes}, images ${uncompressed.perMessage.retention.fullPageImageBytes})`,
  );
  // A checkpoint between the enqueue and the drain (the server is shared: other databases' work
  // requests them all the time) makes the drain's first write to each page log the whole page,
  // which the drain does not cause: the ratio without full-page images is given beside the key.
  // (Measuring again on the same database until none fell inside hung once, in a quick run.)
  const wal = await walPerMessage(claimsDb, size.walMessages, BATCH);
  if (wal.perMessage.dispatch.fullPageImageBytes > 0)
    log(
      `WAL per message (claims): a checkpoint fell inside the drain (${wal.perMessage.dispatch.fullPageImageBytes} bytes of full-page images a message): read details.pgq.wal.claims.ratioWithoutFullPageImages`,
    );
  const theirs = pgq ? await pgqWal(pgq, size.walMessages) : null;
  const dispatch = lanes.perMessage.dispatch.bytes;
  const enqueue = lanes.perMessage.enqueue.bytes;
  const claimsDispatch = wal.perMessage.dispatch.bytes;
  const claimsEnqueue = wal.perMessage.enqueue.bytes;
  log(
    `WAL per message: lanes dispatch ${dispatch} vs enqueue ${enqueue} bytes; claims ${claimsDispatch} vs ${claimsEnqueue}${theirs ? `; PgQ consume ${theirs.consumeBytes} vs insert ${theirs.enqueueBytes}` : ''}`,
  );
  return {
    ratio: round(dispatch / enqueue, 4),
    engine: 'lanes',
    // The same without full-page images, which only say when checkpoints happened to fall.
    ratioWithoutFullPageImages: round(
      (dispatch - lanes.perMessage.dispatch.fullPageImageBytes) /
        (enqueue - lanes.perMessage.enqueue.fullPageImageBytes),
      4,
    ),
    bytesPerMessage: { dispatch, enqueue },
    fullPageImageBytes: {
      dispatch: lanes.perMessage.dispatch.fullPageImageBytes,
      enqueue: lanes.perMessage.enqueue.fullPageImageBytes,
    },
    records: lanes.records,
    /**
     * The claim engine's `wal_per_message_ratio` measured on the lanes engine (dispatch and
     * retention over enqueue), at the server's `wal_compression` (the prune compressing its
     * full-page images, migration 034) and with that compression off (before migration 034).
     */
    withRetention: {
      ratio: lanes.walPerMessageRatio,
      ratioWithoutFullPageImages: lanes.walPerMessageRatioWithoutFullPageImages,
      retentionBytesPerMessage: lanes.perMessage.retention,
      walCompression: lanes.walCompression,
      uncompressedPrune: {
        ratio: uncompressed.walPerMessageRatio,
        ratioWithoutFullPageImages: uncompressed.walPerMessageRatioWithoutFullPageImages,
        retentionBytesPerMessage: uncompressed.perMessage.retention,
      },
    },
    claims: {
      ratio: round(claimsDispatch / claimsEnqueue, 3),
      ratioWithoutFullPageImages: round(
        (claimsDispatch - wal.perMessage.dispatch.fullPageImageBytes) /
          (claimsEnqueue - wal.perMessage.enqueue.fullPageImageBytes),
        3,
      ),
      bytesPerMessage: { dispatch: claimsDispatch, enqueue: claimsEnqueue },
      fullPageImageBytes: {
        dispatch: wal.perMessage.dispatch.fullPageImageBytes,
        enqueue: wal.perMessage.enqueue.fullPageImageBytes,
      },
      records: wal.records.dispatch,
    },
    pgq: theirs,
    count: size.walMessages,
  };
}

/** Names `--only` accepts for this group: each key, or `pgq` for all four. */
const KEYS = [
  'dispatch_vs_pgq',
  'held_snapshot_vs_pgq',
  'enqueue_vs_pgq',
  'dispatch_wal_per_message_ratio',
] as const;

/**
 * Issue 43's PgQ keys, each on databases created for it (`fresh`, main.ts's onFreshDatabase).
 * Without the pgq extension the PgQ keys are null with the reason printed and kept in
 * `details.pgq.skipped`; `dispatch_wal_per_message_ratio` is ours alone and still runs.
 */
export async function pgqCases(
  fresh: <T>(suffix: string, fn: (db: BenchDatabase) => Promise<T>) => Promise<T>,
  quick: boolean,
  names: Set<string> | null,
) {
  const size = quick ? PGQ_SIZE.quick : PGQ_SIZE.full;
  const wants = (key: (typeof KEYS)[number]) => !names || names.has(key) || names.has('pgq');
  // `wal_per_message_ratio` (the engine a new schema runs on: lanes, since session 33) is
  // measured here too, with retention; `--only wal` picks it, the claim engine's in details.wal.
  const wantsWal =
    wants('dispatch_wal_per_message_ratio') ||
    names?.has('wal_per_message_ratio') === true ||
    names?.has('wal') === true;
  if (!KEYS.some(wants) && !wantsWal) return { keys: {}, details: {} };
  const skipped = await fresh('pgq_probe', pgqMissing);
  if (skipped) log(`PgQ keys skipped: ${skipped}`);
  const withPgq = <T>(
    key: (typeof KEYS)[number],
    suffix: string,
    run: (db: BenchDatabase) => Promise<T>,
  ) => (wants(key) && !skipped ? fresh(suffix, run) : Promise.resolve(null));
  const dispatch = await withPgq('dispatch_vs_pgq', 'pgq', (db) => dispatchVsPgq(db, size));
  const held = await withPgq('held_snapshot_vs_pgq', 'pgq_held', (db) =>
    heldSnapshotVsPgq(db, size),
  );
  const enqueue = await withPgq('enqueue_vs_pgq', 'pgq_enqueue', (db) => enqueueVsPgq(db, size));
  const wal = wantsWal
    ? await fresh('pgq_wal_lanes', (lanes) =>
        fresh('pgq_wal_lanes_whole', (whole) =>
          fresh('pgq_wal', (claims) =>
            skipped
              ? dispatchWal(lanes, whole, claims, null, size)
              : fresh('pgq_wal_pgq', (theirs) => dispatchWal(lanes, whole, claims, theirs, size)),
          ),
        ),
      )
    : null;
  return {
    keys: {
      dispatch_vs_pgq: dispatch?.ratio ?? null,
      held_snapshot_vs_pgq: held?.ratio ?? null,
      enqueue_vs_pgq: enqueue?.ratio ?? null,
      dispatch_wal_per_message_ratio: wal?.ratio ?? null,
      wal_per_message_ratio: wal?.withRetention.ratio ?? null,
    },
    details: {
      pgq: {
        skipped: skipped ?? null,
        ticker: `the bench: pgq.ticker(queue) after every ${BATCH} events inserted (ticker_max_count ${BATCH}, PgQ's default), so a batch is ${BATCH} events; every ${TICK_PERIOD_MS} ms by a timer during enqueue_vs_pgq`,
        doesNotGuarantee:
          'no per-message retry state (a batch is finished whole; event_retry re-inserts an event into a later batch), no per-aggregate order under retry, one consumer per batch, latency of at least the tick period',
        ours: `the lanes engine (migration 024): createOutbox({ engine: 'lanes' }) and createLaneDispatcher, batch ${BATCH}, concurrency ${LANE_CONCURRENCY} (one batch in flight in dispatch.oneBatchInFlight), no-op publisher; the claim engine (createOutbox() + createDispatcher) in each key's claims. The lanes engine has every feature of the claim engine (dedupe keys, delays, shadow messages, approvals, tenants' fair shares, rate limits, destination limits, retention, fleet mode); none is used here`,
        dispatch,
        held,
        enqueue,
        wal,
      },
    },
  };
}

/** The rows of main.ts's table for {@link pgqCases}' keys. */
export function pgqRows(r: Record<string, unknown>): string[] {
  const d = (r.details as { pgq?: Awaited<ReturnType<typeof pgqCases>>['details']['pgq'] }).pgq;
  const row = (key: string, baseline: string, target: string) =>
    `| ${key} | ${r[key] === null || r[key] === undefined ? 'n/a' : String(r[key])} | ${baseline} | ${target} |`;
  const why = d?.skipped ? `not measured: ${d.skipped}` : 'not run';
  const n = (value: number) => value.toLocaleString('en-US');
  return [
    row(
      'dispatch_vs_pgq',
      d?.dispatch
        ? `lanes ${d.dispatch.perSecond.oursUnordered} unordered / ${d.dispatch.perSecond.oursOrdered} ordered vs ${d.dispatch.perSecond.pgq} events/s PgQ ${d.dispatch.pgqVersion} (${n(d.dispatch.count)}, batches of ${BATCH}, ticked per ${BATCH}); claims ${d.dispatch.claims.perSecond.unordered} / ${d.dispatch.claims.perSecond.ordered} (${d.dispatch.claims.ratio})`
        : why,
      '>= 1.0 (issue 43)',
    ),
    row(
      'held_snapshot_vs_pgq',
      d?.held
        ? `lanes ${d.held.perSecond.oursUnordered} / ${d.held.perSecond.oursOrdered} vs ${d.held.perSecond.pgq} events/s after ${n(d.held.history)} processed on each side under a held REPEATABLE READ snapshot; claims ${d.held.claims.perSecond.unordered} / ${d.held.claims.perSecond.ordered} (${d.held.claims.ratio})`
        : why,
      '>= 0.9 (issue 43)',
    ),
    row(
      'enqueue_vs_pgq',
      d?.enqueue
        ? `lanes ${d.enqueue.msPerTx.ours} vs ${d.enqueue.msPerTx.pgq} ms/tx (bare ${d.enqueue.msPerTx.bare}; overhead ${d.enqueue.overheadRatio}x PgQ's); claims ${d.enqueue.claims.msPerTx} (${d.enqueue.claims.ratio})`
        : why,
      '<= 1.2 (issue 43)',
    ),
    row(
      'wal_per_message_ratio',
      d?.wal
        ? `lanes engine (a new schema's): dispatch ${d.wal.bytesPerMessage.dispatch} + retention ${d.wal.withRetention.retentionBytesPerMessage.bytes} (full-page images ${d.wal.withRetention.retentionBytesPerMessage.fullPageImageBytes}, compressed by the prune) vs enqueue ${d.wal.bytesPerMessage.enqueue} bytes per message; ${d.wal.withRetention.uncompressedPrune.ratio} with the prune's compression off; the claim engine's in details.wal`
        : 'not run',
      '<= 0.35 (issue 43)',
    ),
    row(
      'dispatch_wal_per_message_ratio',
      d?.wal
        ? `lanes dispatch ${d.wal.bytesPerMessage.dispatch} vs enqueue ${d.wal.bytesPerMessage.enqueue} bytes per message (with retention, wal_per_message_ratio's definition: ${d.wal.withRetention.ratio}; ${d.wal.withRetention.uncompressedPrune.ratio} with the prune's compression off); claims ${d.wal.claims.bytesPerMessage.dispatch} vs ${d.wal.claims.bytesPerMessage.enqueue} (${d.wal.claims.ratio})${d.wal.pgq ? `; PgQ consume ${d.wal.pgq.consumeBytes} vs insert ${d.wal.pgq.enqueueBytes} bytes per event` : ''}`
        : 'not run',
      '<= 0.05 (issue 43)',
    ),
  ];
}
