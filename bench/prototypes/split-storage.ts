/**
 * A prototype, not the product: the outbox split in two, measured beside the current design on
 * the same server (issue 25, what would take `wal_per_message_ratio` under 0.5 and
 * `dispatch_vs_graphile_worker` over 1.5). The message is written once into `p.msg` and never
 * updated or copied; what a claim and a settle change lives in a narrow row of `p.pend`, leased
 * in place (HOT) and deleted at the settle. "Dispatched" is "in `p.msg`, not in `p.pend`";
 * retention would TRUNCATE rotated `p.msg` tables as it does the ring today. Left out: dedupe
 * keys, approvals, tenants, the wake check, dead letters, the lane floor.
 *
 *   npx tsx bench/prototypes/split-storage.ts
 *
 * Prints, per message: the WAL of enqueue (one message per transaction, a new aggregate each,
 * ordered) and of dispatch (claim + settle, batch 200) for the prototype and for the current
 * design (bench/cases/wal-per-message.ts); then three alternated rounds of a 50,000-message
 * unordered drain: the prototype's claim+settle loop, the raw claim+mark loop on our table and
 * our dispatcher (bench/cases/dispatch.ts); then the two-message business transaction through
 * the prototype and through our writer, in alternated blocks of 100.
 */
import { createOutbox, fromPg } from '../../src/index.js';
import { createBenchDatabase, type BenchDatabase } from '../lib/database.js';
import { log, median, round } from '../lib/measure.js';
import { rate } from '../cases/dispatch.js';
import { orderMessages } from '../cases/enqueue.js';
import { lsn, walBytes, walRecords, walPerMessage } from '../cases/wal-per-message.js';

const SCHEMA = `
CREATE SCHEMA p;
CREATE SEQUENCE p.ids;
CREATE TABLE p.msg (
  id bigint PRIMARY KEY, message_id uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
  aggregate_id text NOT NULL, topic text NOT NULL, payload jsonb NOT NULL,
  headers jsonb NOT NULL DEFAULT '{}', sequence bigint NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()) WITH (fillfactor = 100);
CREATE TABLE p.pend (
  id bigint PRIMARY KEY, aggregate_id text NOT NULL, sequence bigint NOT NULL,
  available_at timestamptz NOT NULL, ready boolean NOT NULL, ordered boolean NOT NULL,
  prev_id bigint, attempts int NOT NULL DEFAULT 0, lease_owner text, lease_expires_at timestamptz,
  last_error text, dead_lettered_at timestamptz) WITH (fillfactor = 50);
CREATE INDEX pend_ready ON p.pend (available_at, id) WHERE ready AND dead_lettered_at IS NULL;
CREATE INDEX pend_chain ON p.pend (aggregate_id, sequence) WHERE ordered;
CREATE TABLE p.agg (aggregate_id text PRIMARY KEY, last_sequence bigint NOT NULL,
  last_ordered_id bigint, prev_ordered_id bigint) WITH (fillfactor = 50);
CREATE FUNCTION p.enqueue(p_agg text, p_topic text, p_payload jsonb, p_ordered boolean)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE v_id bigint := nextval('p.ids'); v_seq bigint; v_prev bigint; v_ready boolean;
BEGIN
  INSERT INTO p.agg AS a (aggregate_id, last_sequence, last_ordered_id) VALUES (p_agg, 1, v_id)
  ON CONFLICT (aggregate_id) DO UPDATE SET last_sequence = a.last_sequence + 1,
    prev_ordered_id = a.last_ordered_id, last_ordered_id = v_id
  RETURNING a.last_sequence, a.prev_ordered_id INTO v_seq, v_prev;
  v_ready := NOT p_ordered OR v_prev IS NULL OR NOT EXISTS (SELECT 1 FROM p.pend x WHERE x.id = v_prev);
  INSERT INTO p.msg (id, aggregate_id, topic, payload, sequence)
  VALUES (v_id, p_agg, p_topic, p_payload, v_seq);
  INSERT INTO p.pend (id, aggregate_id, sequence, available_at, ready, ordered, prev_id)
  VALUES (v_id, p_agg, v_seq, clock_timestamp(), v_ready, p_ordered, CASE WHEN p_ordered THEN v_prev END);
  RETURN v_id;
END $$`;

const CLAIM = `
WITH h AS (
  SELECT id FROM p.pend
  WHERE ready AND dead_lettered_at IS NULL AND available_at <= now()
    AND (lease_expires_at IS NULL OR lease_expires_at <= now())
  ORDER BY available_at, id LIMIT 200
  FOR UPDATE SKIP LOCKED),
u AS (
  UPDATE p.pend x
  SET lease_owner = $1, lease_expires_at = now() + interval '30 seconds', attempts = x.attempts + 1
  FROM h WHERE x.id = h.id
  RETURNING x.id, x.attempts)
SELECT u.id::text AS id, m.message_id, m.topic, m.aggregate_id, m.sequence, m.payload, m.headers,
       m.created_at, u.attempts
FROM u JOIN p.msg m ON m.id = u.id`;

/** The settle: the rows leave `p.pend`; an ordered successor becomes ready. */
const SETTLE = `
WITH d AS (
  DELETE FROM p.pend x WHERE x.id = ANY ($1::bigint[]) AND x.lease_owner = $2
  RETURNING x.aggregate_id, x.sequence, x.ordered)
UPDATE p.pend n SET ready = true
FROM d
WHERE d.ordered AND n.aggregate_id = d.aggregate_id AND n.sequence = d.sequence + 1
  AND n.ordered AND NOT n.ready`;

async function drainPrototype(db: BenchDatabase): Promise<number> {
  const client = await db.client();
  let rows = 0;
  try {
    for (let k = 0; ; k++) {
      const claimed = await client.query<{ id: string }>({
        name: 'p_claim',
        text: CLAIM,
        values: [`p#${k}`],
      });
      if (claimed.rows.length === 0) return rows;
      rows += claimed.rows.length;
      await client.query({
        name: 'p_settle',
        text: SETTLE,
        values: [claimed.rows.map((r) => r.id), `p#${k}`],
      });
    }
  } finally {
    await client.end();
  }
}

async function walOfPrototype(db: BenchDatabase, count: number) {
  await db.pool.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
  const pin = await db.pool.connect();
  await pin.query(`SELECT pg_create_physical_replication_slot($1, true, true)`, [
    `ao_proto_wal_${process.pid}`,
  ]);
  await db.pool.query('CHECKPOINT');
  const start = await lsn(db);
  const client = await db.client();
  for (let i = 0; i < count; i++) {
    await client.query('BEGIN');
    await client.query('SELECT p.enqueue($1, $2, $3, true)', [
      `wal-${i}`,
      'payment.charge',
      { orderId: i, total: 99.5 },
    ]);
    await client.query('COMMIT');
  }
  await client.end();
  const enqueued = await lsn(db);
  const drained = await drainPrototype(db);
  if (drained !== count) throw new Error(`prototype drained ${drained} of ${count}`);
  const dispatched = await lsn(db);
  const result = {
    enqueue: Math.round((await walBytes(db, start, enqueued)).bytes / count),
    dispatch: Math.round((await walBytes(db, enqueued, dispatched)).bytes / count),
    records: {
      enqueue: await walRecords(db, start, enqueued, count),
      dispatch: await walRecords(db, enqueued, dispatched, count),
    },
  };
  pin.release(true);
  return { ...result, ratio: round(result.dispatch / result.enqueue) };
}

async function prototypeRate(db: BenchDatabase, count: number): Promise<number> {
  await db.pool.query('TRUNCATE p.msg, p.pend, p.agg');
  await db.pool.query(
    `INSERT INTO p.msg (id, aggregate_id, topic, payload, sequence)
     SELECT g, 'agg-' || g, 'mail.send', jsonb_build_object('n', g), 1 FROM generate_series(1, $1) g`,
    [count],
  );
  await db.pool.query(
    `INSERT INTO p.pend (id, aggregate_id, sequence, available_at, ready, ordered)
     SELECT g, 'agg-' || g, 1, now(), true, false FROM generate_series(1, $1) g`,
    [count],
  );
  await db.pool.query('VACUUM ANALYZE p.msg, p.pend');
  const started = performance.now();
  const rows = await drainPrototype(db);
  if (rows !== count) throw new Error(`prototype drained ${rows} of ${count}`);
  return (count / (performance.now() - started)) * 1000;
}

/** Median ms per two-message business transaction, alternated blocks of 100. */
async function enqueueBlocks(db: BenchDatabase, blocks: number) {
  // The drains loaded ids 1..50,000 by hand, past the sequence.
  await db.pool.query('TRUNCATE p.msg, p.pend, p.agg');
  await db.pool.query(`CREATE TABLE IF NOT EXISTS bench_orders (id bigserial PRIMARY KEY,
    customer text NOT NULL, total numeric NOT NULL)`);
  const client = await db.client();
  const outbox = createOutbox();
  const times = { none: [] as number[], prototype: [] as number[], writer: [] as number[] };
  const transaction = async (variant: keyof typeof times) => {
    await client.query('BEGIN');
    const order = await client.query<{ id: string }>({
      name: 'p_order',
      text: `INSERT INTO bench_orders (customer, total) VALUES ($1, $2) RETURNING id`,
      values: ['customer-42', 99.5],
    });
    const id = order.rows[0]!.id;
    if (variant === 'prototype')
      await client.query({
        name: 'p_enqueue2',
        text: `SELECT p.enqueue($1, 'payment.charge', $2, true), p.enqueue($1, 'mail.send', $3, true)`,
        values: [`order:${id}`, { orderId: id, total: 99.5 }, { orderId: id, template: 'receipt' }],
      });
    else if (variant === 'writer') await outbox.enqueue(fromPg(client), orderMessages(id));
    await client.query('COMMIT');
  };
  try {
    for (let i = 0; i < 300; i++)
      await transaction((['none', 'prototype', 'writer'] as const)[i % 3]!);
    for (let b = 0; b < blocks; b++)
      for (const variant of ['none', 'prototype', 'writer'] as const) {
        const started = performance.now();
        for (let i = 0; i < 100; i++) await transaction(variant);
        times[variant].push((performance.now() - started) / 100);
      }
  } finally {
    await client.end();
  }
  return Object.fromEntries(
    Object.entries(times).map(([k, v]) => [k, round(median(v), 3)]),
  ) as Record<keyof typeof times, number>;
}

const prototypeDb = await createBenchDatabase('split_proto');
const currentDb = await createBenchDatabase('split_current');
try {
  const server = await prototypeDb.pool.query<{ wal_level: string }>('SHOW wal_level');
  log(`wal_level=${server.rows[0]!.wal_level}`);
  await prototypeDb.pool.query(SCHEMA);
  const proto = await walOfPrototype(prototypeDb, 2_000);
  const current = await walPerMessage(currentDb, 2_000);
  log(
    `WAL per message, prototype: enqueue ${proto.enqueue}, dispatch ${proto.dispatch} (ratio ${proto.ratio})`,
  );
  log(
    `WAL per message, current: enqueue ${current.perMessage.enqueue.bytes}, dispatch ${current.perMessage.dispatch.bytes}, retention ${current.perMessage.retention.bytes} (ratio ${current.ratio})`,
  );
  log(`prototype records: ${JSON.stringify(proto.records.dispatch)}`);
  for (let r = 0; r < 3; r++) {
    const p = await prototypeRate(prototypeDb, 50_000);
    const raw = await rate(prototypeDb, 'raw', 50_000, false);
    const ours = await rate(prototypeDb, 'ours', 50_000, false);
    log(
      `drain of 50,000, msg/s: prototype ${Math.round(p)}, raw claim+mark ${Math.round(raw)}, ours ${Math.round(ours)}`,
    );
  }
  log(
    `two-message business transaction, ms (median block): ${JSON.stringify(await enqueueBlocks(prototypeDb, 10))}`,
  );
} finally {
  await prototypeDb.drop();
  await currentDb.drop();
}
