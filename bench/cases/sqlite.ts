import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  createSqliteDispatcher,
  createSqliteOutbox,
  migrateSqlite,
  openSqlite,
  type DispatchSynchronous,
  type SqliteDatabase,
} from '../../src/stores/sqlite/index.js';

import { enqueueOverheadBlocks } from '../lib/enqueue-blocks.js';
import { timed } from '../lib/measure.js';
import { pairedDrains } from '../lib/paired-drains.js';
import { noopPublisher, orderMessages } from './enqueue.js';

/**
 * The SQLite store's figures (issue 45), each against a baseline on the same kind of file in the
 * same run: a fresh file per drain in a temporary directory, WAL and `synchronous = FULL` on both
 * sides (openSqlite's defaults, what the store ships with). Runnable alone with
 * `npm run bench -- --only sqlite_dispatch_vs_raw_sql,sqlite_enqueue_overhead`; needs no server.
 */

/**
 * The baseline of `sqlite_dispatch_vs_raw_sql`: the plain lease-based loop on SQLite — in one
 * `BEGIN IMMEDIATE`, lease 200 due rows (oldest first, from an index of its own on pending rows
 * by due time, built for the raw runs as the Postgres baseline's is), then, in a second, mark them
 * dispatched where the lease is still its own. It reads what a publisher is handed (message id,
 * topic, aggregate id, payload and headers, both parsed). No order, no attempts, no head chains,
 * no events. Two commits per batch: our store commits a batch's settle with the next claim
 * (src/stores/sqlite/sqlite-write-queue.ts), one commit per batch, so the ratio also measures
 * that.
 */
const RAW_PENDING_INDEX = `CREATE INDEX IF NOT EXISTS bench_raw_pending_idx ON outbox (available_at, id)
  WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL`;
const RAW_CLAIM = `
UPDATE outbox SET lease_owner = ?1, lease_expires_at = ?2 + 30000
 WHERE id IN (SELECT id FROM outbox
               WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL AND available_at <= ?2
                 AND (lease_expires_at IS NULL OR lease_expires_at <= ?2)
               ORDER BY available_at, id LIMIT 200)
RETURNING id, message_id, topic, aggregate_id, payload, headers`;
const RAW_MARK = `
UPDATE outbox SET dispatched_at = ?2, lease_owner = NULL, lease_expires_at = NULL
 WHERE id IN (SELECT value FROM json_each(?3)) AND lease_owner = ?1`;

function rawLoop(db: SqliteDatabase): number {
  const claim = db.prepare(RAW_CLAIM);
  const mark = db.prepare(RAW_MARK);
  let rows = 0;
  for (let batch = 0; ; batch++) {
    const owner = `raw#${batch}`;
    db.exec('BEGIN IMMEDIATE');
    const claimed = claim.all({ 1: owner, 2: Date.now() }) as {
      id: number;
      payload: string;
      headers: string;
    }[];
    db.exec('COMMIT');
    if (claimed.length === 0) return rows;
    for (const row of claimed) {
      JSON.parse(row.payload);
      JSON.parse(row.headers);
    }
    db.exec('BEGIN IMMEDIATE');
    mark.run({ 1: owner, 2: Date.now(), 3: JSON.stringify(claimed.map((r) => r.id)) });
    db.exec('COMMIT');
    rows += claimed.length;
  }
}

/** A fresh migrated file with `count` pending messages on an unordered (or ordered) topic. */
async function seeded(dir: string, name: string, count: number, ordered: boolean) {
  const db = await openSqlite(join(dir, `${name}.db`));
  migrateSqlite(db);
  const outbox = createSqliteOutbox();
  db.transaction(() => {
    for (let i = 0; i < count; i++)
      outbox.enqueue(db, {
        topic: ordered ? 'payment.charge' : 'mail.send',
        aggregateId: ordered ? `agg-${i % 500}` : `agg-${i}`,
        payload: { i, note: 'a payload of a realistic few dozen bytes' },
        ordered,
      });
  }).immediate();
  return db;
}

/** Rows/s of one drain of `count` fresh messages, ours or the raw loop, on a file of its own. */
async function rate(
  dir: string,
  who: 'raw' | 'ours',
  count: number,
  ordered: boolean,
  n: string,
  synchronous: DispatchSynchronous,
) {
  const db = await seeded(dir, `${who}-${ordered ? 'o' : 'u'}-${n}`, count, ordered);
  try {
    if (who === 'raw') db.exec(RAW_PENDING_INDEX);
    let done = 0;
    const ms = await timed(async () => {
      done =
        who === 'raw'
          ? rawLoop(db)
          : (
              await createSqliteDispatcher({
                database: db,
                publisher: noopPublisher,
                batchSize: 200,
                synchronous,
              }).drain()
            ).published;
    });
    if (done !== count) throw new Error(`${who} dispatched ${done} of ${count} on SQLite`);
    return (count / ms) * 1000;
  } finally {
    db.close();
  }
}

/**
 * `sqlite_dispatch_vs_raw_sql`: our dispatcher (createSqliteDispatcher, no-op publisher, batch
 * 200, one loop) over the raw loop, unordered topic, `count` messages each: the median of the
 * ratios of `rounds` back-to-back pairs (which side goes first alternates), as tracing.ts does.
 * On a shared machine a best-of-rounds ratio compares the luckiest run of each side, which may
 * be minutes apart; a pair runs within a second. Target >= 0.9. The ordered figure (500
 * aggregates) is in the details, measured the same way.
 *
 * Ours runs as it ships: its own commits without a flush (`synchronous: 'normal'`,
 * sqlite-write-queue.ts says why that costs no guarantee), the raw loop with a flush per commit
 * (the connection's FULL, what a loop written against openSqlite gets). `sameDurability` is the
 * same comparison with ours at `synchronous: 'full'` too: the CPU of the dispatcher against the
 * raw loop's, commit for commit.
 */
export async function sqliteDispatchVsRaw(count: number, rounds: number) {
  const dir = mkdtempSync(join(tmpdir(), 'ao-bench-sqlite-'));
  try {
    const shipped = await pairedDrains('sqlite', count, rounds, (who, ordered, n) =>
      rate(dir, who, count, ordered, `n${n}`, 'normal'),
    );
    const full = await pairedDrains(
      'sqlite (ours at synchronous=full)',
      count,
      rounds,
      (who, ordered, n) => rate(dir, who, count, ordered, `f${n}`, 'full'),
    );
    return {
      ...shipped,
      sameDurability: {
        ratio: full.ratio,
        orderedRatio: full.orderedRatio,
        rowsPerSecond: full.rowsPerSecond,
      },
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * `sqlite_enqueue_overhead`: ms per business transaction (`BEGIN IMMEDIATE`, one order row,
 * COMMIT) with our writer's two messages (a charge and a receipt, as the Postgres figure) over
 * the same transaction without them, `transactions` each, alternated in blocks of 100 on one
 * file; the median block of each side.
 */
export async function sqliteEnqueueOverhead(transactions: number) {
  const dir = mkdtempSync(join(tmpdir(), 'ao-bench-sqlite-'));
  const db = await openSqlite(join(dir, 'enqueue.db'));
  try {
    migrateSqlite(db);
    db.exec(
      'CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, total REAL NOT NULL)',
    );
    const outbox = createSqliteOutbox();
    const insert = db.prepare('INSERT INTO orders (customer, total) VALUES (?, ?)');
    const order = (withOutbox: boolean) =>
      db
        .transaction(() => {
          const id = insert.run('customer-42', 99.5) as { lastInsertRowid?: number | bigint };
          if (withOutbox) outbox.enqueue(db, orderMessages(String(id.lastInsertRowid)));
        })
        .immediate();
    return await enqueueOverheadBlocks('sqlite', transactions, order);
  } finally {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The SQLite cases; `names` selects (null: all). */
export async function sqliteCases(quick: boolean, names: Set<string> | null) {
  const dispatch =
    !names || names.has('sqlite_dispatch_vs_raw_sql')
      ? await sqliteDispatchVsRaw(quick ? 10_000 : 20_000, quick ? 5 : 11)
      : null;
  const enqueue =
    !names || names.has('sqlite_enqueue_overhead')
      ? await sqliteEnqueueOverhead(quick ? 500 : 2_000)
      : null;
  return {
    keys: {
      sqlite_dispatch_vs_raw_sql: dispatch?.ratio ?? null,
      sqlite_enqueue_overhead: enqueue?.ratio ?? null,
    },
    details: { sqlite: { dispatch, enqueue } },
  };
}

/** The rows of main.ts's table for {@link sqliteCases}' keys. */
export function sqliteRows(r: Record<string, unknown>): string[] {
  const d = (r.details as { sqlite?: Awaited<ReturnType<typeof sqliteCases>>['details']['sqlite'] })
    .sqlite;
  const rows: string[] = [];
  if (d?.dispatch)
    rows.push(
      `| sqlite_dispatch_vs_raw_sql | ${String(r.sqlite_dispatch_vs_raw_sql)} | ${d.dispatch.rowsPerSecond.ours} vs ${d.dispatch.rowsPerSecond.raw} rows/s, raw claim+mark loop on a SQLite file (ordered, 500 aggregates: ${d.dispatch.orderedRatio}; ours at synchronous=full too: ${d.dispatch.sameDurability.ratio}, ordered ${d.dispatch.sameDurability.orderedRatio}) | >= 0.9 |`,
    );
  if (d?.enqueue)
    rows.push(
      `| sqlite_enqueue_overhead | ${String(r.sqlite_enqueue_overhead)} | ${d.enqueue.withOutboxMsPerTx} vs ${d.enqueue.withoutOutboxMsPerTx} ms/tx without outbox, synchronous=FULL | context (no target) |`,
    );
  return rows;
}
