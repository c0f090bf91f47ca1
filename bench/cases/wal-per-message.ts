import type pg from 'pg';
import { createOutbox, createDispatcher, fromPg, pruneOutbox } from '../../src/index.js';
import type { BenchDatabase } from '../lib/database.js';
import { round } from '../lib/measure.js';
import { noopPublisher } from './enqueue.js';

/** The ordered topic every message of the case is written on, as in held-snapshot.ts. */
const TOPIC = 'payment.charge';

/**
 * WAL of this database's relations and of its transactions' commits between two positions,
 * read with pg_walinspect: the server is shared (other databases write WAL at the same time), so
 * a plain LSN difference would count their writes too.
 */
export async function walBytes(db: BenchDatabase, from: string, to: string) {
  const { rows } = await db.pool.query<{ bytes: string | null; fpi: string | null }>(
    `WITH r AS (SELECT * FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)),
          mine AS (
            SELECT * FROM r
            WHERE block_ref LIKE '%/' || (SELECT oid FROM pg_database
                                         WHERE datname = current_database()) || '/%'
          )
     SELECT (coalesce((SELECT sum(record_length) FROM mine), 0)
           + coalesce((SELECT sum(record_length) FROM r
                       WHERE resource_manager = 'Transaction'
                         AND xid IN (SELECT xid FROM mine WHERE xid <> '0')), 0))::text AS bytes,
            coalesce((SELECT sum(fpi_length) FROM mine), 0)::text AS fpi`,
    [from, to],
  );
  return { bytes: Number(rows[0]!.bytes ?? 0), fpi: Number(rows[0]!.fpi ?? 0) };
}

/**
 * The same WAL by record type and relation, bytes per message (the biggest first): what each
 * part writes, so a change to the storage can be read off the bench (issue 25 asked to count
 * them). `count` is the records per message: 1 is one tuple version (or lock) per message.
 */
export async function walRecords(db: BenchDatabase, from: string, to: string, messages: number) {
  const { rows } = await db.pool.query<{ key: string; records: string; bytes: string }>(
    `WITH r AS (
       SELECT record_type, record_length,
              (regexp_match(block_ref, 'rel \\d+/\\d+/(\\d+)'))[1]::oid AS node
       FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
       WHERE block_ref LIKE '%/' || (SELECT oid FROM pg_database
                                    WHERE datname = current_database()) || '/%')
     SELECT r.record_type || ' ' || coalesce(c.relname, r.node::text) AS key,
            count(*)::text AS records, sum(r.record_length)::text AS bytes
     FROM r LEFT JOIN pg_class c ON c.relfilenode = r.node
     GROUP BY 1 ORDER BY sum(r.record_length) DESC LIMIT 12`,
    [from, to],
  );
  return Object.fromEntries(
    rows.map((r) => [
      r.key,
      {
        perMessage: round(Number(r.records) / messages),
        bytes: Math.round(Number(r.bytes) / messages),
      },
    ]),
  );
}

/**
 * The WAL insert position now, flushed: pg_walinspect reads only flushed WAL, and the insert
 * position can be ahead of the flush (other sessions' asynchronous commits on the shared server:
 * "cannot accept future end LSN"). A committed xid flushes past it; its commit record touches no
 * relation, so walBytes does not count it.
 */
export async function lsn(db: BenchDatabase): Promise<string> {
  const { rows } = await db.pool.query<{ lsn: string }>(
    `SELECT pg_current_wal_insert_lsn()::text AS lsn`,
  );
  await db.pool.query('SELECT pg_current_xact_id()');
  const at = rows[0]!.lsn;
  // pg_walinspect reads flushed WAL only: an end past the flush fails with "cannot accept future
  // end LSN". The commit above need not flush (it wrote no WAL but its commit record, so it
  // commits asynchronously); the WAL writer flushes within wal_writer_delay (200 ms by default).
  // That error, intermittent, was the bench's WAL "hang" (its pinned client was not released,
  // so the database's drop waited for ever).
  for (let waited = 0; waited < 5_000; waited += 10) {
    const flushed = await db.pool.query<{ ok: boolean }>(
      `SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn AS ok`,
      [at],
    );
    if (flushed.rows[0]!.ok) return at;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`bench: WAL not flushed up to ${at} within 5 s`);
}

/** Checkpoints the server has started (timed and requested), since its statistics' reset. */
async function checkpoints(db: BenchDatabase): Promise<number> {
  const { rows } = await db.pool.query<{ n: string }>(
    `SELECT (checkpoints_timed + checkpoints_req)::text AS n FROM pg_stat_bgwriter`,
  );
  return Number(rows[0]!.n);
}

/**
 * `wal_per_message_ratio`: the WAL that dispatch and retention write per message over the WAL of
 * its enqueue. `count` messages, each enqueued by the writer in a transaction of its own (one per
 * aggregate, ordered topic); then drained (no-op publisher, `batchSize`, 200 for
 * `wal_per_message_ratio`); then pruned. A
 * CHECKPOINT before the enqueue and before the prune: retention runs days after the rows were
 * written, long after the checkpoint that followed them, so its first write to each page logs the
 * whole page (a full-page image) — a prune measured right after the drain would not.
 */
export async function walPerMessage(db: BenchDatabase, count: number, batchSize = 200) {
  await db.pool.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
  // A slot of this session (temporary: gone with the connection) keeps the WAL from here until
  // it is read: on a shared server, other databases' writes can trigger checkpoints that would
  // recycle it first.
  const pin = await db.pool.connect();
  try {
    return await walPerMessagePinned(db, pin, count, batchSize);
  } finally {
    // Always: a pinned client never released makes the database's drop (pool.end) wait for it
    // for ever, and an error thrown here was never seen — the bench "hang" of 2026-12-05/06.
    pin.release(true);
  }
}

async function walPerMessagePinned(
  db: BenchDatabase,
  pin: pg.PoolClient,
  count: number,
  batchSize: number,
) {
  const outbox = createOutbox();
  await pin.query(`SELECT pg_create_physical_replication_slot($1, true, true)`, [
    `ao_bench_wal_${process.pid}`,
  ]);
  await db.pool.query('CHECKPOINT');
  const checkpointsAtStart = await checkpoints(db);
  const start = await lsn(db);
  const client = await db.pool.connect();
  try {
    for (let i = 0; i < count; i++) {
      await client.query('BEGIN');
      await outbox.enqueue(fromPg(client), {
        topic: TOPIC,
        aggregateId: `wal-${i}`,
        payload: { orderId: i, total: 99.5 },
      });
      await client.query('COMMIT');
    }
  } finally {
    client.release();
  }
  const enqueued = await lsn(db);
  const drained = await createDispatcher({
    executor: fromPg(db.pool),
    publisher: noopPublisher,
    batchSize,
  }).drain();
  if (drained.published !== count)
    throw new Error(`bench: drained ${drained.published} of ${count}`);
  const dispatched = await lsn(db);
  const checkpointsDuring = (await checkpoints(db)) - checkpointsAtStart;
  // Read before the prune: its TRUNCATE gives the ring's tables new relfilenodes, and the
  // records of the drain would then no longer name the tables they were written to.
  const dispatchRecords = {
    enqueue: await walRecords(db, start, enqueued, count),
    dispatch: await walRecords(db, enqueued, dispatched, count),
  };
  await db.pool.query('CHECKPOINT');
  const beforePrune = await lsn(db);
  const pruned = await pruneOutbox(fromPg(db.pool), { olderThanMs: 0 });
  if (pruned.removed !== count) throw new Error(`bench: pruned ${pruned.removed} of ${count}`);
  const end = await lsn(db);
  const enqueue = await walBytes(db, start, enqueued);
  const dispatch = await walBytes(db, enqueued, dispatched);
  const retention = await walBytes(db, beforePrune, end);
  const records = {
    ...dispatchRecords,
    retention: await walRecords(db, beforePrune, end, count),
  };
  const perMessage = (w: { bytes: number; fpi: number }) => ({
    bytes: Math.round(w.bytes / count),
    fullPageImageBytes: Math.round(w.fpi / count),
  });
  return {
    ratio: round((dispatch.bytes + retention.bytes) / enqueue.bytes),
    /**
     * The same without full-page images: on a shared server other sessions' checkpoints (every
     * DROP DATABASE takes one) land inside the enqueue or the drain and make the first write to
     * each page after them log the whole page — 0.31 to 0.67 for the same code on 2026-12-04.
     * `checkpointsDuring` counts them (the server's, from the CHECKPOINT before the enqueue to
     * the end of the drain).
     */
    ratioWithoutFullPageImages: round(
      (dispatch.bytes - dispatch.fpi + retention.bytes - retention.fpi) /
        (enqueue.bytes - enqueue.fpi),
    ),
    checkpointsDuring,
    perMessage: {
      enqueue: perMessage(enqueue),
      dispatch: perMessage(dispatch),
      retention: perMessage(retention),
    },
    records,
    count,
  };
}
