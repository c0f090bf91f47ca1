import type pg from 'pg';
import {
  createDispatcher,
  createPublisherFromUrl,
  fromPg,
  PgOutboxStore,
  type Publisher,
} from '../../src/index.js';
import type { BenchDatabase } from '../lib/database.js';
import { log, percentiles, round, sleep } from '../lib/measure.js';
import { startSink } from './hot-aggregate.js';

/**
 * `fair_share_p95_ms` (issue 27): tenant A commits a burst of 30,000 messages on 3,000 aggregates
 * (one INSERT, `tenant_id` header); ONE dispatcher drains it to a local HTTP sink (a child
 * process, hot-aggregate.ts); while it drains, tenant B commits a trickle, one message per
 * transaction every 50 ms on 10 aggregates of its own. The key: the p95 of B's commit → arrival
 * at the sink (from just before COMMIT, as latency.ts measures). Target: ≤ 500 ms.
 *
 * The same run with the oldest-first claim (`PgOutboxStore` with `tenantShares: false`) is
 * measured after it, on a database of its own, as the baseline (details.fairShare.oldestFirst).
 * Runnable alone with `npm run bench -- --only fair_share_p95_ms`.
 */

const TRICKLE_EVERY_MS = 50;
const B_AGGREGATES = 10;

interface Trickle {
  received: number;
  arrivals: [number, number][];
}

/** One engine's part in {@link trickleThroughBurst}. */
export interface TrickleEngine {
  /** What the log line calls the run. */
  label: string;
  /** The one dispatcher that drains A's burst (already committed) to the sink's `publisher`. */
  dispatcher(publisher: Publisher): { start(): void; stop(): Promise<void> };
  /** Writes B's `n`-th message on `aggregateId` inside the transaction open on `client`. */
  writeB(client: pg.PoolClient, n: number, aggregateId: string): Promise<void>;
}

/**
 * The measurement both fair-share cases share: A's `burst` is in the table; one dispatcher drains
 * it to a local HTTP sink while B commits a trickle, one message per transaction every 50 ms on
 * 10 aggregates of its own, until A has drained; then the last of B's trickle arrives too. B's
 * latency: commit (from just before COMMIT, as latency.ts measures) → arrival at the sink.
 * `beforeStop` runs while the dispatcher is still up, for what a case reads of the table then:
 * its fields join the result. `aggregates`: A's, as reported.
 */
export async function trickleThroughBurst<T extends object = Record<never, never>>(
  db: BenchDatabase,
  { burst, aggregates }: { burst: number; aggregates: number },
  engine: TrickleEngine,
  beforeStop?: () => Promise<T>,
) {
  const sink = await startSink();
  const trickleUrl = sink.url.replace(/\/hook$/, '/trickle');
  const trickle = async () => (await (await fetch(trickleUrl)).json()) as Trickle;
  const dispatcher = engine.dispatcher(await createPublisherFromUrl(sink.url));
  const committedAt: number[] = [];
  const started = performance.now();
  try {
    dispatcher.start();
    // The burst is being delivered: B starts its trickle and keeps it up until A has drained.
    while ((await trickle()).received < 1_000) await sleep(10);
    let drainedAt = 0;
    for (let n = 0; ; n++) {
      const client = await db.pool.connect();
      try {
        await client.query('BEGIN');
        await engine.writeB(client, n, `b-${n % B_AGGREGATES}`);
        committedAt[n] = Date.now();
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      await sleep(TRICKLE_EVERY_MS);
      const { received, arrivals } = await trickle();
      if (received - arrivals.length >= burst) {
        drainedAt = performance.now();
        break;
      }
    }
    // The last of B's trickle arrives too.
    const deadline = Date.now() + 30_000;
    while ((await trickle()).arrivals.length < committedAt.length && Date.now() < deadline)
      await sleep(20);
    const { arrivals } = await trickle();
    const { outOfOrder } = await sink.stats();
    const latencies = arrivals.map(([n, at]) => at - committedAt[n]!);
    const p = percentiles(latencies);
    const extra = beforeStop ? await beforeStop() : ({} as T);
    log(
      `${engine.label}: B p50 ${p.p50} ms, p95 ${p.p95} ms over ${latencies.length} messages; A's ${burst} drained in ${round((drainedAt - started) / 1000, 1)} s`,
    );
    return {
      bLatencyMs: p,
      bMessages: committedAt.length,
      bArrived: arrivals.length,
      aDrainSeconds: round((drainedAt - started) / 1000, 1),
      burst,
      aggregates,
      outOfOrder,
      ...extra,
    };
  } finally {
    await dispatcher.stop();
    sink.close();
  }
}

export async function fairShareRun(db: BenchDatabase, burst: number, tenantShares: boolean) {
  const aggregates = burst / 10;
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload, headers)
     SELECT 'a-' || (g % $2), 'payment.charge', jsonb_build_object('n', g),
            '{"tenant_id": "tenant-a"}'::jsonb
     FROM generate_series(1, $1::int) g ORDER BY g`,
    [burst, aggregates],
  );
  await db.pool.query('VACUUM ANALYZE outbox');
  return trickleThroughBurst(
    db,
    { burst, aggregates },
    {
      label: `fair share (${tenantShares ? 'tenant shares' : 'oldest first'})`,
      dispatcher: (publisher) =>
        createDispatcher({
          store: new PgOutboxStore(fromPg(db.pool), { tenantShares }),
          publisher,
          pollIntervalMs: 20,
        }),
      writeB: async (client, n, aggregateId) => {
        await client.query(
          `INSERT INTO outbox (aggregate_id, topic, payload, headers)
         VALUES ($1, 'mail.send', $2, '{"tenant_id": "tenant-b"}')`,
          [aggregateId, JSON.stringify({ trickle: n })],
        );
      },
    },
  );
}

/** The case, with tenant shares and then oldest first, each on a fresh database. */
export async function fairShare(
  fresh: <T>(suffix: string, fn: (db: BenchDatabase) => Promise<T>) => Promise<T>,
  burst: number,
) {
  const shares = await fresh('fair', (d) => fairShareRun(d, burst, true));
  const oldestFirst = await fresh('fair_oldest', (d) => fairShareRun(d, burst, false));
  return { p95: shares.bLatencyMs.p95, tenantShares: shares, oldestFirst };
}

/** The row of main.ts's table for `fair_share_p95_ms`. */
export function fairShareRow(r: Record<string, unknown>): string {
  const d = (r.details as { fairShare?: Awaited<ReturnType<typeof fairShare>> | null }).fairShare;
  const value = r.fair_share_p95_ms ?? 'n/a';
  const baseline = d
    ? `B p50 ${d.tenantShares.bLatencyMs.p50} ms while A's ${d.tenantShares.burst} drained in ${d.tenantShares.aDrainSeconds} s; oldest first: B p50 ${d.oldestFirst.bLatencyMs.p50}, p95 ${d.oldestFirst.bLatencyMs.p95} ms, A in ${d.oldestFirst.aDrainSeconds} s`
    : 'not run';
  return `| fair_share_p95_ms | ${String(value)} | ${baseline} | <= 500 |`;
}
