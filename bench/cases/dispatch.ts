import { createDispatcher, fromPg } from '../../src/index.js';
import type { BenchDatabase } from '../lib/database.js';
import { quiesce, resetOutbox, seedPending } from '../lib/database.js';
import { log, round, timed } from '../lib/measure.js';
import { batchTables } from '../../src/sql/dispatched-log.js';
import { insertDispatchedHistory } from '../lib/dispatched-history.js';
import { noopPublisher } from './enqueue.js';

/**
 * The baseline: the least a correct lease-based dispatcher must do per batch, as a plain `pg`
 * loop on one connection — claim 200 due rows under a lease with SKIP LOCKED, then mark them
 * dispatched. No ordering check, no attempts, no fencing, no events. It runs with a partial
 * index of its own on pending rows by due time (`RAW_PENDING_INDEX`, what the outbox itself had
 * until migration 009), built before and dropped after each raw run: our claim reads
 * `outbox_ready_idx` instead, which holds only heads, and without an index the raw claim would
 * scan the table on every batch (measured: 11 ms per claim at 50,000 rows) — a baseline made slow,
 * not a floor.
 */
const RAW_PENDING_INDEX = `CREATE INDEX bench_raw_pending_idx ON outbox (available_at, id)
  WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL`;
const rawClaim = `
WITH due AS (
  SELECT id FROM outbox
  WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL AND available_at <= now()
    AND (lease_expires_at IS NULL OR lease_expires_at <= now())
  ORDER BY available_at, id
  LIMIT 200
  FOR UPDATE SKIP LOCKED
)
UPDATE outbox o SET lease_owner = $1, lease_expires_at = now() + interval '30 seconds'
FROM due WHERE o.id = due.id
RETURNING o.id, o.topic, o.aggregate_id, o.payload`;
const rawMark = `
UPDATE outbox SET dispatched_at = now(), lease_owner = NULL, lease_expires_at = NULL
WHERE id = ANY($1::bigint[]) AND lease_owner = $2`;

/**
 * The design SPEC §4.4 rules out, measured only to show what it costs us: hold the row locks of
 * `FOR UPDATE SKIP LOCKED` in a transaction across the publish and mark the rows in it. Each row
 * is then written once (the mark) instead of twice (lease, then mark), but the transaction stays
 * open while the broker is called, and a crash rolls back whatever it counted: no lease to fence
 * with, no attempt recorded for a message that kills the dispatcher (a crash loop).
 */
const lockHeldSelect = `
SELECT id, topic, aggregate_id, payload FROM outbox
WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL AND available_at <= now()
ORDER BY available_at, id
LIMIT 200
FOR UPDATE SKIP LOCKED`;
const lockHeldMark = `UPDATE outbox SET dispatched_at = now() WHERE id = ANY($1::bigint[])`;

async function lockHeldLoop(db: BenchDatabase): Promise<number> {
  const client = await db.client();
  let rows = 0;
  try {
    for (;;) {
      await client.query('BEGIN');
      const claimed = await client.query<{ id: string }>(lockHeldSelect);
      if (claimed.rows.length > 0)
        await client.query(lockHeldMark, [claimed.rows.map((r) => r.id)]);
      await client.query('COMMIT');
      if (claimed.rows.length === 0) return rows;
      rows += claimed.rows.length;
    }
  } finally {
    await client.end();
  }
}

async function rawLoop(db: BenchDatabase): Promise<number> {
  const client = await db.client();
  let rows = 0;
  try {
    for (let batch = 0; ; batch++) {
      const claimed = await client.query<{ id: string }>(rawClaim, [`raw#${batch}`]);
      if (claimed.rows.length === 0) return rows;
      await client.query(rawMark, [claimed.rows.map((r) => r.id), `raw#${batch}`]);
      rows += claimed.rows.length;
    }
  } finally {
    await client.end();
  }
}

async function ourDrain(db: BenchDatabase, ordered: boolean, batchSize: number): Promise<number> {
  const dispatcher = createDispatcher({
    executor: fromPg(db.pool),
    publisher: noopPublisher,
    batchSize,
    unorderedTopics: ordered ? [] : ['mail.*'],
  });
  const result = await dispatcher.drain();
  return result.published;
}

/**
 * Rows/s of one drain of `count` fresh rows: our dispatcher, the raw claim+mark loop, or the
 * lock-held loop (lease-cost.ts). `batchSize` is our dispatcher's (the raw loops claim 200).
 */
export async function rate(
  db: BenchDatabase,
  who: 'raw' | 'ours' | 'lockHeld',
  count: number,
  ordered: boolean,
  batchSize = 200,
): Promise<number> {
  await resetOutbox(db.pool);
  await seedPending(db.pool, count, {
    topic: ordered ? 'payment.charge' : 'mail.send',
    aggregates: ordered ? 500 : count,
  });
  // Ours runs without the raw loops' index (it would only add index writes to our settles).
  if (who !== 'ours') await db.pool.query(RAW_PENDING_INDEX);
  let done = 0;
  let ms: number;
  try {
    ms = await timed(async () => {
      done =
        who === 'raw'
          ? await rawLoop(db)
          : who === 'lockHeld'
            ? await lockHeldLoop(db)
            : await ourDrain(db, ordered, batchSize);
    });
  } finally {
    if (who !== 'ours') await db.pool.query('DROP INDEX IF EXISTS bench_raw_pending_idx');
  }
  if (done !== count) throw new Error(`${who} dispatched ${done} of ${count}`);
  return (count / ms) * 1000;
}

/**
 * `dispatch_vs_raw_sql` (unordered topic) and `dispatch_ordered_vs_raw_sql` (ordered topic, 500
 * aggregates): our dispatcher (no-op publisher, batch 200, one loop) over the raw loop, the same
 * rows and the same one connection. Best of `rounds` alternated runs each, to damp noise.
 */
export async function dispatchVsRaw(db: BenchDatabase, count: number, rounds: number) {
  const best = { raw: 0, ours: 0, rawOrdered: 0, oursOrdered: 0 };
  for (let round = 0; round < rounds; round++) {
    best.raw = Math.max(best.raw, await rate(db, 'raw', count, false));
    best.ours = Math.max(best.ours, await rate(db, 'ours', count, false));
    best.rawOrdered = Math.max(best.rawOrdered, await rate(db, 'raw', count, true));
    best.oursOrdered = Math.max(best.oursOrdered, await rate(db, 'ours', count, true));
  }
  log(
    `dispatch rows/s: raw ${Math.round(best.raw)}, ours ${Math.round(best.ours)} (unordered), ours ${Math.round(best.oursOrdered)} (ordered, 500 aggregates)`,
  );
  return {
    unorderedRatio: round(best.ours / best.raw, 3),
    orderedRatio: round(best.oursOrdered / best.rawOrdered, 3),
    rowsPerSecond: {
      raw: Math.round(best.raw),
      ours: Math.round(best.ours),
      rawOrdered: Math.round(best.rawOrdered),
      oursOrdered: Math.round(best.oursOrdered),
    },
  };
}

/**
 * `history_scaling`: our dispatch rate with `historyRows` dispatched rows in the table over the
 * rate with none, on two databases created for it: `db` stays empty; `historyDb` gets the history
 * bulk-loaded into the dispatched ring (migrations 018 and 021: where published messages are kept; nothing
 * is pending), then VACUUM ANALYZE, as a long-running ring would be. The two are measured in alternation, best of
 * `rounds` each: measured one after the other (all empty runs, the 5M-row load, all history
 * runs), whatever the machine did during the load tilted the ratio — 0.82 to 1.24 across full
 * runs of the same code.
 */
export async function historyScaling(
  db: BenchDatabase,
  historyDb: BenchDatabase,
  historyRows: number,
  count: number,
  rounds: number,
) {
  const loadMs = await timed(async () => {
    const client = await historyDb.client();
    try {
      // Into the ring's first slot, as the settle writes it since migration 021 (ids from the
      // outbox's own sequence, so the pending rows the rounds add come after them).
      await insertDispatchedHistory(
        client,
        `SELECT nextval(pg_get_serial_sequence('outbox', 'id')) AS id,
                outbox_uuid_v7() AS message_id, 'hist-' || (g % 100000) AS aggregate_id,
                'mail.send' AS topic, '{"h":1}'::jsonb AS payload, '{}'::jsonb AS headers,
                g / 100000 + 1 AS sequence, now() - interval '10 days' AS created_at,
                now() - interval '10 days' AS available_at, now() - interval '9 days' AS dispatched_at,
                1 AS attempts, false AS shadow, false AS ordered, false AS ready
         FROM generate_series(1, $1) g`,
        [historyRows],
      );
      await client.query('VACUUM ANALYZE outbox_dispatched_batch_0');
    } finally {
      await client.end();
    }
  });
  log(`history: loaded ${historyRows} dispatched rows in ${Math.round(loadMs / 1000)} s`);
  let empty = 0;
  let withHistory = 0;
  for (let r = 0; r < rounds; r++) {
    empty = Math.max(empty, await rateKeepingHistory(db, count));
    withHistory = Math.max(withHistory, await rateKeepingHistory(historyDb, count));
  }
  log(`history: ${Math.round(empty)} rows/s empty, ${Math.round(withHistory)} with history`);
  return {
    ratio: round(withHistory / empty, 3),
    historyRows,
    rounds,
    rowsPerSecond: { empty: Math.round(empty), withHistory: Math.round(withHistory) },
  };
}

/** Like `rate` for our dispatcher, but keeps the history: deletes only the rows it added. */
async function rateKeepingHistory(db: BenchDatabase, count: number): Promise<number> {
  await db.pool.query(`DELETE FROM outbox WHERE topic = 'bench.pending'`);
  // Earlier rounds' messages were settled into the ring after the history, which was dispatched
  // days ago: delete the batches of the last day (the index on dispatched_at; opening 5,000,000
  // messages to find their topic would be the bench).
  for (const table of batchTables('public')) {
    await db.pool.query(`DELETE FROM ${table} WHERE dispatched_at > now() - interval '1 day'`);
  }
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload)
     SELECT 'p-' || g, 'bench.pending', jsonb_build_object('n', g) FROM generate_series(1, $1) g`,
    [count],
  );
  await db.pool.query('VACUUM ANALYZE outbox');
  // Loading millions of history rows wrote gigabytes of WAL: without this, the checkpoints it
  // triggers write behind the measurement (0.48 in one full run, 0.88 in the next).
  await quiesce(db);
  const dispatcher = createDispatcher({
    executor: fromPg(db.pool),
    publisher: noopPublisher,
    batchSize: 200,
    unorderedTopics: ['bench.*'],
  });
  let published = 0;
  const ms = await timed(async () => {
    published = (await dispatcher.drain()).published;
  });
  if (published !== count) throw new Error(`dispatched ${published} of ${count}`);
  return (count / ms) * 1000;
}
