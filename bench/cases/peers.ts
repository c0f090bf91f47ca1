import type pg from 'pg';
import PgBoss from 'pg-boss';
import {
  Logger,
  makeWorkerUtils,
  run,
  runMigrations,
  type Runner,
  type RunnerOptions,
} from 'graphile-worker';
import { quiesce, type BenchDatabase } from '../lib/database.js';
import { log, round, sleep, type Percentiles } from '../lib/measure.js';
import { minimalQueueCeiling } from './ceiling.js';
import { leaseCost } from './lease-cost.js';
import { rate } from './dispatch.js';
import { commitTimes, latencies, steadyLoad, waitFor } from './latency.js';

/**
 * Peer job queues (issue 7): pg-boss 10.4.2 and graphile-worker 0.17.3, each tuned as its own
 * docs advise, each in its own schema of the bench database (dropped afterwards; the whole
 * database is dropped at the end of the run and on SIGINT/SIGTERM).
 */
export const PG_BOSS_SCHEMA = 'ao_bench_pgboss';
export const GRAPHILE_SCHEMA = 'ao_bench_graphile_worker';

/** pg-boss: `batchSize` as our dispatcher's claim; 0.5 s is the smallest polling interval. */
const PG_BOSS_BATCH = 200;
/**
 * graphile-worker's published performance configuration
 * (https://worker.graphile.org/docs/performance): concurrentJobs 24, maxPoolSize 25,
 * localQueue.size 500, completeJobBatchDelay 0, failJobBatchDelay 0.
 */
const GRAPHILE_TUNED = {
  concurrency: 24,
  maxPoolSize: 25,
  preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
} satisfies Partial<RunnerOptions>;

/**
 * How many jobs graphile-worker fetches per query in that configuration (its local queue): our
 * dispatcher is compared with it at the same claim size, as with pg-boss at its `batchSize`.
 */
const GRAPHILE_FETCH = GRAPHILE_TUNED.preset.worker.localQueue.size;

const quietGraphileLogger = new Logger(() => () => undefined);
const INSERT_CHUNK = 5_000;

async function dropSchema(db: BenchDatabase, schema: string): Promise<void> {
  await db.pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
}

/** Polls `done` (a cheap count on the peer's table) until it holds; returns when it did. */
async function until(done: () => Promise<boolean>, timeoutMs = 120_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error('bench: peer did not finish in time');
    await sleep(2);
  }
  return performance.now();
}

/**
 * pg-boss jobs/s for `count` no-op jobs inserted beforehand with `insert()` (in chunks of 5,000),
 * processed by `workers` `work()` loops with `batchSize` 200 and `pollingIntervalSeconds` 0.5
 * (the minimum), each loop bursting: a handler that got a full batch calls `notifyWorker(id)`
 * so the loop fetches again at once instead of sleeping out the interval. Timed from the first
 * job handed to a handler to the last job in state `completed` (pg-boss completes a batch
 * without awaiting it, so the table is the only place that says when the work is done).
 */
export async function pgBossRate(
  db: BenchDatabase,
  count: number,
  workers: number,
  queueName?: string,
): Promise<number> {
  const boss = new PgBoss({
    connectionString: db.url,
    schema: PG_BOSS_SCHEMA,
    max: 10,
    application_name: 'ao-bench-pgboss',
    supervise: false, // no maintenance or cron runs during the measurement
    schedule: false,
  });
  boss.on('error', (error) => log(`pg-boss error: ${error.message}`));
  await boss.start();
  // A queue of its own per run (pg-boss 10 keeps each queue in a partition), unless the caller
  // names one: held-snapshot.ts runs its measured drain in the queue that holds its history.
  const queue = queueName ?? `noop_${workers}_${Date.now()}`;
  try {
    if (!(await boss.getQueue(queue))) await boss.createQueue(queue);
    for (let from = 0; from < count; from += INSERT_CHUNK) {
      const jobs = Array.from({ length: Math.min(INSERT_CHUNK, count - from) }, (_, i) => ({
        name: queue,
        data: { n: from + i },
      }));
      await boss.insert(jobs);
    }
    await db.pool.query(`VACUUM ANALYZE ${PG_BOSS_SCHEMA}.job`);
    const completedBefore = (
      await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${PG_BOSS_SCHEMA}.job WHERE name = $1 AND state = 'completed'`,
        [queue],
      )
    ).rows[0]!.n;
    let handled = 0;
    let firstStart = 0;
    for (let w = 0; w < workers; w++) {
      const worker = { id: '' };
      worker.id = await boss.work(
        queue,
        { batchSize: PG_BOSS_BATCH, pollingIntervalSeconds: 0.5 },
        async (jobs) => {
          if (firstStart === 0) firstStart = performance.now();
          handled += jobs.length;
          if (jobs.length === PG_BOSS_BATCH && worker.id) boss.notifyWorker(worker.id);
        },
      );
    }
    await waitFor(() => handled >= count, Math.max(120_000, count * 2));
    const lastDone = await until(async () => {
      const { rows } = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${PG_BOSS_SCHEMA}.job WHERE name = $1 AND state = 'completed'`,
        [queue],
      );
      return rows[0]!.n >= completedBefore + count;
    });
    if (handled !== count) throw new Error(`pg-boss handled ${handled} of ${count}`);
    return (count / (lastDone - firstStart)) * 1000;
  } finally {
    await boss.stop({ graceful: false, wait: true, close: true });
  }
}

function graphileOptions(
  db: BenchDatabase,
  tuned: boolean,
  onJob: (payload: unknown) => void,
): RunnerOptions {
  return {
    connectionString: db.url,
    schema: GRAPHILE_SCHEMA,
    logger: quietGraphileLogger,
    noHandleSignals: true, // main.ts owns SIGINT/SIGTERM (drops the database)
    crontab: '',
    taskList: {
      noop: async (payload) => {
        onJob(payload);
      },
    },
    ...(tuned ? GRAPHILE_TUNED : {}),
  };
}

async function graphileRunner(options: RunnerOptions): Promise<Runner> {
  const runner = await run(options);
  runner.promise.catch((error: unknown) => log(`graphile-worker stopped: ${String(error)}`));
  return runner;
}

/**
 * graphile-worker jobs/s for `count` no-op jobs added beforehand with `addJobs` (chunks of
 * 5,000), run with its published performance configuration (local queue of 500, batched
 * completion and failure). Timed from the first job start to the jobs table being empty
 * (graphile-worker deletes a job when it completes).
 */
export async function graphileRate(
  db: BenchDatabase,
  count: number,
  options_: { truncate?: boolean } = {},
): Promise<number> {
  let handled = 0;
  let firstStart = 0;
  const options = graphileOptions(db, true, () => {
    if (firstStart === 0) firstStart = performance.now();
    handled++;
  });
  await runMigrations(options);
  // held-snapshot.ts keeps what its history left (TRUNCATE would drop the dead rows it measures).
  if (options_.truncate !== false)
    await db.pool.query(`TRUNCATE ${GRAPHILE_SCHEMA}._private_jobs CASCADE`);
  const utils = await makeWorkerUtils({
    connectionString: db.url,
    schema: GRAPHILE_SCHEMA,
    logger: quietGraphileLogger,
  });
  try {
    for (let from = 0; from < count; from += INSERT_CHUNK) {
      const specs = Array.from({ length: Math.min(INSERT_CHUNK, count - from) }, (_, i) => ({
        identifier: 'noop',
        payload: { n: from + i },
      }));
      await utils.addJobs(specs);
    }
  } finally {
    await utils.release();
  }
  await db.pool.query(`VACUUM ANALYZE ${GRAPHILE_SCHEMA}._private_jobs`);
  const runner = await graphileRunner(options);
  try {
    await waitFor(() => handled >= count, Math.max(120_000, count * 2));
    const lastDone = await until(async () => {
      const { rows } = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${GRAPHILE_SCHEMA}._private_jobs`,
      );
      return rows[0]!.n === 0;
    });
    if (handled !== count) throw new Error(`graphile-worker ran ${handled} of ${count}`);
    return (count / (lastDone - firstStart)) * 1000;
  } finally {
    await runner.stop();
  }
}

/**
 * `dispatch_vs_pg_boss` and `dispatch_vs_graphile_worker`: our dispatcher's rate on the
 * dispatch_vs_raw_sql workload (no-op publisher, unordered topic, `count` rows) over each peer's
 * best rate for the same number of no-op jobs, each side fetching as many per query: batch 200
 * against pg-boss's `batchSize` 200, batch 500 against graphile-worker's local queue of 500 (its
 * performance configuration fetches 500 jobs per query; measured at 200 against it as well,
 * `graphileWorkerRatioAtBatch200`). pg-boss is tried with one burst loop (the same number of
 * loops as ours) and with 4 loops; the ratio uses the faster. Best of `rounds` alternated runs
 * each. The raw claim+mark loop of dispatch_vs_raw_sql (200 per claim) runs in the same rounds:
 * it is the ceiling for a one-loop dispatcher on our table, so raw/peer says what ratio is
 * reachable; the minimal-table loops (ceiling.ts) say what any claim+settle design could reach.
 */
export async function dispatchVsPeers(db: BenchDatabase, count: number, rounds: number) {
  const best = {
    ours: 0,
    oursAtGraphileFetch: 0,
    raw: 0,
    pgBoss1: 0,
    pgBoss4: 0,
    graphileWorker: 0,
  };
  try {
    for (let r = 0; r < rounds; r++) {
      best.ours = Math.max(best.ours, await rate(db, 'ours', count, false));
      best.oursAtGraphileFetch = Math.max(
        best.oursAtGraphileFetch,
        await rate(db, 'ours', count, false, GRAPHILE_FETCH),
      );
      best.raw = Math.max(best.raw, await rate(db, 'raw', count, false));
      best.pgBoss1 = Math.max(best.pgBoss1, await pgBossRate(db, count, 1));
      best.pgBoss4 = Math.max(best.pgBoss4, await pgBossRate(db, count, 4));
      best.graphileWorker = Math.max(best.graphileWorker, await graphileRate(db, count));
    }
  } finally {
    await dropSchema(db, PG_BOSS_SCHEMA);
    await dropSchema(db, GRAPHILE_SCHEMA);
  }
  const ceiling = await minimalQueueCeiling(db, count, rounds);
  const lease = await leaseCost(db, count, rounds);
  const pgBoss = Math.max(best.pgBoss1, best.pgBoss4);
  log(
    `peers jobs/s: ours ${Math.round(best.ours)} (batch 200) / ${Math.round(best.oursAtGraphileFetch)} (batch ${GRAPHILE_FETCH}), raw claim+mark ${Math.round(best.raw)}, pg-boss ${Math.round(best.pgBoss1)} (1 loop) / ${Math.round(best.pgBoss4)} (4 loops), graphile-worker ${Math.round(best.graphileWorker)}`,
  );
  return {
    pgBossRatio: round(best.ours / pgBoss, 2),
    graphileWorkerRatio: round(best.oursAtGraphileFetch / best.graphileWorker, 2),
    graphileWorkerRatioAtBatch200: round(best.ours / best.graphileWorker, 2),
    // The ceiling for any one-loop lease dispatcher here: the raw claim+mark loop over each peer.
    rawSqlVsPgBoss: round(best.raw / pgBoss, 2),
    rawSqlVsGraphileWorker: round(best.raw / best.graphileWorker, 2),
    // What no claim+settle dispatcher can beat here: the minimal table's loops over each peer.
    minimalMarkVsGraphileWorker: round(ceiling.mark / best.graphileWorker, 2),
    minimalDeleteVsGraphileWorker: round(ceiling.delete / best.graphileWorker, 2),
    minimalDeleteVsPgBoss: round(ceiling.delete / pgBoss, 2),
    minimalMarkVsPgBoss: round(ceiling.mark / pgBoss, 2),
    // Where the pg-boss ratio stops on our table (lease-cost.ts): each variant's rows/s and its
    // ratio to pg-boss.
    leaseCost: {
      rowsPerSecond: lease,
      vsPgBoss: Object.fromEntries(
        Object.entries(lease).map(([variant, perSecond]) => [
          variant,
          round(perSecond / pgBoss, 2),
        ]),
      ) as Record<keyof typeof lease, number>,
    },
    count,
    perSecond: {
      ours: Math.round(best.ours),
      oursAtGraphileFetch: Math.round(best.oursAtGraphileFetch),
      rawSql: Math.round(best.raw),
      pgBoss: Math.round(pgBoss),
      pgBossOneLoop: Math.round(best.pgBoss1),
      pgBossFourLoops: Math.round(best.pgBoss4),
      graphileWorker: Math.round(best.graphileWorker),
      minimalTableClaimMark: ceiling.mark,
      minimalTableClaimDelete: ceiling.delete,
    },
  };
}

/**
 * `latency_ms.graphile_worker`: commit → job start at a steady `perSecond`, with the same
 * producers, clock and warm-up as ours (the clock starts when COMMIT is sent; the job is added
 * with `<schema>.add_job` inside the producer's transaction, which is how graphile-worker
 * enqueues transactionally), run with the performance configuration. (With the library
 * defaults — one job at a time, no local queue — it cannot sustain 1,000 jobs/s here: the
 * backlog grows and p50 reaches seconds, so that configuration is not measured.)
 */
export async function graphileLatency(
  db: BenchDatabase,
  perSecond: number,
  seconds: number,
): Promise<Percentiles> {
  const times = commitTimes();
  const receivedAt = new Map<string, number>();
  const options = graphileOptions(db, true, (payload) => {
    const key = (payload as { key?: string } | null)?.key;
    if (key !== undefined && !receivedAt.has(key)) receivedAt.set(key, performance.now());
  });
  try {
    await runMigrations(options);
    await quiesce(db);
    const runner = await graphileRunner(options);
    try {
      await sleep(300);
      await steadyLoad(
        db,
        perSecond,
        seconds,
        async (client: pg.Client, key: string) => {
          await client.query(
            `SELECT ${GRAPHILE_SCHEMA}.add_job('noop', json_build_object('key', $1::text))`,
            [key],
          );
          return key;
        },
        times,
      );
      await waitFor(() => [...times.sentAt.keys()].every((k) => receivedAt.has(k)));
    } finally {
      await runner.stop();
    }
  } finally {
    await dropSchema(db, GRAPHILE_SCHEMA);
  }
  return latencies('graphile_worker', times, receivedAt, Math.floor(perSecond / 2));
}
