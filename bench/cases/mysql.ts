import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import {
  createMysqlDispatcher,
  createMysqlOutbox,
  migrateMysql,
  openMysql,
  type MysqlPool,
} from '../../src/stores/mysql/index.js';
import { NOW_MS } from '../../src/sql/mysql/clock.js';
import { isReachable } from '../../test/helpers/services.js';
import { enqueueOverheadBlocks } from '../lib/enqueue-blocks.js';
import { log, median, round, timed } from '../lib/measure.js';
import { pairedDrains } from '../lib/paired-drains.js';
import { noopPublisher, orderMessages } from './enqueue.js';

/**
 * The MySQL/MariaDB store's figures (issue 45), each against a baseline on the same server in
 * the same run: a database of their own (`ao_bench_mysql_<hex>`, dropped after) on `MYSQL_URL`
 * or this machine's MariaDB (127.0.0.1:3306, root). Skipped with a printed reason when no server
 * answers. Runnable alone with
 * `npm run bench -- --only mysql_dispatch_vs_raw_sql,mysql_enqueue_overhead,mysql_hot_aggregate_ratio`.
 */
const SERVER = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';

/**
 * The baseline of `mysql_dispatch_vs_raw_sql`: the least a correct lease-based dispatcher does
 * per batch on MySQL — in one READ COMMITTED transaction, `SELECT ... FOR UPDATE SKIP LOCKED`
 * of 200 due rows (oldest first, on the same pending index) and a lease UPDATE; then, after
 * "publishing" (payload and headers parsed), mark them dispatched where the lease is still its
 * own. No order, no attempts, no heads, no events.
 */
const RAW_CLAIM = `
SELECT id, message_id, topic, aggregate_id, payload, headers FROM outbox FORCE INDEX (outbox_claim_idx)
 WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL AND parked = 0 AND available_at <= ${NOW_MS}
   AND (lease_expires_at IS NULL OR lease_expires_at <= ${NOW_MS})
 ORDER BY available_at, id LIMIT 200
 FOR UPDATE SKIP LOCKED`;
const RAW_LEASE = `UPDATE outbox SET lease_owner = ?, lease_expires_at = ${NOW_MS} + 30000 WHERE id IN (?)`;
const RAW_MARK = `
UPDATE outbox SET dispatched_at = ${NOW_MS}, lease_owner = NULL, lease_expires_at = NULL
 WHERE id IN (?) AND lease_owner = ?`;

async function rawLoop(pool: MysqlPool): Promise<number> {
  const connection = await pool.getConnection();
  let rows = 0;
  try {
    await connection.query('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');
    await connection.query("SET SESSION time_zone = '+00:00'");
    for (let batch = 0; ; batch++) {
      const owner = `raw#${batch}`;
      await connection.query('BEGIN');
      const [claimed] = (await connection.query(RAW_CLAIM)) as [
        { id: number; payload: string; headers: string }[],
        unknown,
      ];
      if (claimed.length > 0) await connection.query(RAW_LEASE, [owner, claimed.map((r) => r.id)]);
      await connection.query('COMMIT');
      if (claimed.length === 0) return rows;
      for (const row of claimed) {
        JSON.parse(row.payload);
        JSON.parse(row.headers);
      }
      await connection.query(RAW_MARK, [claimed.map((r) => r.id), owner]);
      rows += claimed.length;
    }
  } finally {
    connection.release();
  }
}

async function admin(sql: string) {
  const connection = await mysql.createConnection(SERVER);
  try {
    await connection.query(sql);
  } finally {
    await connection.end();
  }
}

/** A database of its own, migrated, dropped by `drop()`. */
async function benchDatabase() {
  const name = `ao_bench_mysql_${randomBytes(4).toString('hex')}`;
  await admin(`CREATE DATABASE \`${name}\` CHARACTER SET utf8mb4`);
  const url = new URL(SERVER);
  url.pathname = `/${name}`;
  const pool = await openMysql(url.toString(), { connectionLimit: 4 });
  await migrateMysql(pool);
  return {
    url: url.toString(),
    pool,
    drop: async () => {
      await pool.end();
      await admin(`DROP DATABASE IF EXISTS \`${name}\``);
    },
  };
}

/** `count` pending messages (in transactions of 500), unordered or ordered on 500 aggregates. */
async function seed(url: string, count: number, ordered: boolean, round: number) {
  const connection = await mysql.createConnection(url);
  const outbox = createMysqlOutbox();
  try {
    for (let done = 0; done < count; done += 500) {
      await connection.beginTransaction();
      await outbox.enqueue(
        connection,
        Array.from({ length: Math.min(500, count - done) }, (_, k) => {
          const i = done + k;
          return {
            topic: ordered ? 'payment.charge' : 'mail.send',
            aggregateId: ordered ? `r${round}-agg-${i % 500}` : `r${round}-agg-${i}`,
            payload: { i, note: 'a payload of a realistic few dozen bytes' },
            ordered,
          };
        }),
      );
      await connection.commit();
    }
  } finally {
    await connection.end();
  }
}

/** Rows/s of one drain of `count` fresh messages, ours or the raw loop. */
async function rate(
  db: Awaited<ReturnType<typeof benchDatabase>>,
  who: 'raw' | 'ours',
  count: number,
  ordered: boolean,
  n: number,
) {
  await seed(db.url, count, ordered, n);
  let done = 0;
  const ms = await timed(async () => {
    done =
      who === 'raw'
        ? await rawLoop(db.pool)
        : (
            await createMysqlDispatcher({
              pool: db.pool,
              publisher: noopPublisher,
              batchSize: 200,
            }).drain()
          ).published;
  });
  if (done !== count) throw new Error(`${who} dispatched ${done} of ${count} on MySQL`);
  return (count / ms) * 1000;
}

/**
 * `mysql_dispatch_vs_raw_sql`: our dispatcher (createMysqlDispatcher, no-op publisher, batch
 * 200, one loop) over the raw loop, unordered topic, `count` messages each: the median of the
 * ratios of `rounds` back-to-back pairs (which side goes first alternates), as sqlite.ts does.
 * Target >= 0.9. The ordered figure (500 aggregates: one head each per claim) is in the
 * details, measured the same way.
 */
export async function mysqlDispatchVsRaw(count: number, rounds: number) {
  const db = await benchDatabase();
  try {
    return await pairedDrains('mysql', count, rounds, (who, ordered, n) =>
      rate(db, who, count, ordered, n),
    );
  } finally {
    await db.drop();
  }
}

/**
 * `mysql_hot_aggregate_ratio`: rows/s of our dispatcher (no-op publisher, batch 200) draining
 * `count` ordered messages of ONE aggregate over the same drain of `count` messages on `count`
 * aggregates, in the same run: the median of the ratios of `rounds` back-to-back pairs (which side
 * goes first alternates). Without runs (src/sql/mysql/claim.ts `runsBehindSql`) the hot aggregate
 * went out one message per claim round; with them, a claim takes a run of up to a batch.
 * Context, no target: 1 would be a hot aggregate as fast as spread traffic.
 */
export async function mysqlHotAggregate(count: number, rounds: number) {
  const db = await benchDatabase();
  const drain = async (hot: boolean, n: number) => {
    const connection = await mysql.createConnection(db.url);
    const outbox = createMysqlOutbox();
    try {
      for (let done = 0; done < count; done += 500) {
        await connection.beginTransaction();
        await outbox.enqueue(
          connection,
          Array.from({ length: Math.min(500, count - done) }, (_, k) => ({
            topic: 'payment.charge',
            aggregateId: hot ? `hot-${n}` : `spread-${n}-${done + k}`,
            payload: { i: done + k, note: 'a payload of a realistic few dozen bytes' },
          })),
        );
        await connection.commit();
      }
    } finally {
      await connection.end();
    }
    let done = 0;
    const ms = await timed(async () => {
      done = (
        await createMysqlDispatcher({
          pool: db.pool,
          publisher: noopPublisher,
          batchSize: 200,
        }).drain()
      ).published;
    });
    if (done !== count) throw new Error(`dispatched ${done} of ${count} on MySQL (hot: ${hot})`);
    return (count / ms) * 1000;
  };
  try {
    const ratios: number[] = [];
    const hotRates: number[] = [];
    const spreadRates: number[] = [];
    for (let n = 0; n < rounds; n++) {
      const hotFirst = n % 2 === 0;
      const first = await drain(hotFirst, n);
      const second = await drain(!hotFirst, n);
      const [hot, spread] = hotFirst ? [first, second] : [second, first];
      hotRates.push(hot);
      spreadRates.push(spread);
      ratios.push(hot / spread);
    }
    const ratio = round(median(ratios), 3);
    log(`mysql hot aggregate: ${ratio} (pairs ${ratios.map((r) => round(r, 2)).join(', ')})`);
    return {
      ratio,
      pairRatios: ratios.map((r) => round(r, 3)),
      rowsPerSecond: { hot: Math.round(median(hotRates)), spread: Math.round(median(spreadRates)) },
      count,
      rounds,
    };
  } finally {
    await db.drop();
  }
}

/**
 * `mysql_enqueue_overhead`: ms per business transaction (BEGIN, one order row, COMMIT on one
 * mysql2 connection) with our writer's two messages (a charge and a receipt, as the Postgres
 * figure) over the same transaction without them, `transactions` each, alternated in blocks of
 * 100; the median block of each side.
 */
export async function mysqlEnqueueOverhead(transactions: number) {
  const db = await benchDatabase();
  const connection = await mysql.createConnection(db.url);
  try {
    await connection.query(
      'CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(64) NOT NULL, total DECIMAL(10,2) NOT NULL)',
    );
    const outbox = createMysqlOutbox();
    const order = async (withOutbox: boolean) => {
      await connection.beginTransaction();
      const [header] = await connection.query(
        'INSERT INTO orders (customer, total) VALUES (?, ?)',
        ['customer-42', 99.5],
      );
      if (withOutbox)
        await outbox.enqueue(
          connection,
          orderMessages(String((header as { insertId: number }).insertId)),
        );
      await connection.commit();
    };
    return await enqueueOverheadBlocks('mysql', transactions, order);
  } finally {
    await connection.end();
    await db.drop();
  }
}

/** The MySQL cases; `names` selects (null: all). Null keys when no server answers. */
export async function mysqlCases(quick: boolean, names: Set<string> | null) {
  const wanted = (key: string) => !names || names.has(key);
  const keys = {
    mysql_dispatch_vs_raw_sql: null as number | null,
    mysql_enqueue_overhead: null as number | null,
    mysql_hot_aggregate_ratio: null as number | null,
  };
  if (
    !wanted('mysql_dispatch_vs_raw_sql') &&
    !wanted('mysql_enqueue_overhead') &&
    !wanted('mysql_hot_aggregate_ratio')
  )
    return { keys, details: {} };
  const { hostname, port } = new URL(SERVER);
  if (!(await isReachable(hostname, Number(port || 3306)))) {
    log(`mysql cases skipped: no MySQL/MariaDB server on ${hostname}:${port || 3306} (MYSQL_URL)`);
    return { keys, details: { mysql: { skipped: 'no server' } } };
  }
  const server = await (async () => {
    const connection = await mysql.createConnection(SERVER);
    try {
      const [rows] = await connection.query('SELECT VERSION() AS version');
      return (rows as { version: string }[])[0]!.version;
    } finally {
      await connection.end();
    }
  })();
  const dispatch = wanted('mysql_dispatch_vs_raw_sql')
    ? await mysqlDispatchVsRaw(quick ? 5_000 : 10_000, quick ? 3 : 7)
    : null;
  const enqueue = wanted('mysql_enqueue_overhead')
    ? await mysqlEnqueueOverhead(quick ? 500 : 2_000)
    : null;
  const hot = wanted('mysql_hot_aggregate_ratio')
    ? await mysqlHotAggregate(2_000, quick ? 3 : 5)
    : null;
  keys.mysql_dispatch_vs_raw_sql = dispatch?.ratio ?? null;
  keys.mysql_enqueue_overhead = enqueue?.ratio ?? null;
  keys.mysql_hot_aggregate_ratio = hot?.ratio ?? null;
  return { keys, details: { mysql: { server, dispatch, enqueue, hot } } };
}

/** The rows of main.ts's table for {@link mysqlCases}' keys. */
export function mysqlRows(r: Record<string, unknown>): string[] {
  const d = (
    r.details as {
      mysql?: {
        dispatch?: Awaited<ReturnType<typeof mysqlDispatchVsRaw>> | null;
        enqueue?: Awaited<ReturnType<typeof mysqlEnqueueOverhead>> | null;
        hot?: Awaited<ReturnType<typeof mysqlHotAggregate>> | null;
      };
    }
  ).mysql;
  const rows: string[] = [];
  if (d?.dispatch)
    rows.push(
      `| mysql_dispatch_vs_raw_sql | ${String(r.mysql_dispatch_vs_raw_sql)} | ${d.dispatch.rowsPerSecond.ours} vs ${d.dispatch.rowsPerSecond.raw} rows/s, raw SKIP LOCKED claim+mark loop on the same MariaDB (ordered, 500 aggregates: ${d.dispatch.orderedRatio}) | >= 0.9 |`,
    );
  if (d?.enqueue)
    rows.push(
      `| mysql_enqueue_overhead | ${String(r.mysql_enqueue_overhead)} | ${d.enqueue.withOutboxMsPerTx} vs ${d.enqueue.withoutOutboxMsPerTx} ms/tx without outbox | context (no target) |`,
    );
  if (d?.hot)
    rows.push(
      `| mysql_hot_aggregate_ratio | ${String(r.mysql_hot_aggregate_ratio)} | ${d.hot.rowsPerSecond.hot} vs ${d.hot.rowsPerSecond.spread} rows/s: ${d.hot.count} messages of one aggregate vs on ${d.hot.count} aggregates, same run | context (no target) |`,
    );
  return rows;
}
