import pg from 'pg';
import { createDispatcher, fromPg, PgOutboxStore } from '../../src/index.js';
import type { BenchDatabase } from '../lib/database.js';
import { log, percentiles, round, timed, type Percentiles } from '../lib/measure.js';
import { noopPublisher } from './enqueue.js';
import { graphileRate, pgBossRate } from './peers.js';
import { walPerMessage } from './wal-per-message.js';
import { prepareClaims } from '../../src/dispatcher/repair-heads.js';

/**
 * Issue 25: the outbox beside a snapshot held open (a report, pg_dump, an idle-in-transaction
 * session, a standby's feedback). Two databases created for the case; in one, a REPEATABLE READ
 * transaction on another connection takes its snapshot first and keeps it to the end.
 *
 * - `held_snapshot_claim_ratio`: p50 of `PgOutboxStore.claim` (batch 200, client wall time with
 *   its commit) after `history` messages were dispatched under the held snapshot, over the same
 *   claim after the same history without one.
 * - `held_snapshot_drain_ratio`: a `backlog` of fresh messages drained by our dispatcher (no-op
 *   publisher, batch 200, one loop) after that history, held over plain — the dispatcher that
 *   dispatched the history, still running, as `outbox dispatch` would be; three back-to-back
 *   pairs of drains after both histories, the median of their ratios. What a dispatcher
 *   that STARTS pays under the snapshot (the floor put back a minute, so its first claim reads
 *   the minute's dead entries) is `details.held.held.restartMs`, beside the plain one; before
 *   issue 25's session 10 every drain here used a new dispatcher, and the start also repaired
 *   every head (502 ms after 1,000,000 dispatched).
 * - `held_snapshot_vs_graphile_worker` / `held_snapshot_vs_pg_boss`: our held drain over each
 *   peer's drain of the same backlog in the same held database, after a history of its own of
 *   `peerHistory` jobs run under the same snapshot (tuned as in peers.ts; pg-boss with 4 loops).
 *   A smaller history than ours, so these ratios favour the peers.
 *
 * Messages: one per aggregate, on an ordered topic (every one a head: the claim's common case).
 */
const HISTORY_CHUNK = 50_000;
/** Drains of each side, in back-to-back pairs (see heldSnapshot). */
const DRAIN_PAIRS = 3;

/** The median; of an even count, the mean of the two middle values. */
function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const half = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[half]! : (sorted[half - 1]! + sorted[half]!) / 2;
}
const TOPIC = 'payment.charge';

async function insertMessages(db: BenchDatabase, count: number): Promise<void> {
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload)
     SELECT 'agg-' || g || '-' || md5(random()::text), $2, jsonb_build_object('n', g)
     FROM generate_series(1, $1::int) g`,
    [count, TOPIC],
  );
}

/** Our dispatcher as the bench runs it: no-op publisher, batch 200, one loop. */
const benchDispatcher = (db: BenchDatabase) =>
  createDispatcher({ executor: fromPg(db.pool), publisher: noopPublisher, batchSize: 200 });

/**
 * Rate of one drain of `count` messages by `dispatcher` — by default a new one, which first puts
 * the lane floor back a minute (repair-heads.ts `prepareClaims`); the held-snapshot drain passes
 * the dispatcher that dispatched the history, as a running `outbox dispatch` is.
 */
async function drainRate(
  db: BenchDatabase,
  count: number,
  dispatcher = benchDispatcher(db),
): Promise<number> {
  let published = 0;
  const ms = await timed(async () => {
    published = (await dispatcher.drain()).published;
  });
  if (published !== count) throw new Error(`bench: drained ${published} of ${count}`);
  return (count / ms) * 1000;
}

/**
 * What a dispatcher that starts pays before its first claim returns: its preparation (the floor
 * put back a minute) and that claim, which under a held snapshot reads the dead entries of the
 * minute before — ms, the claim rolled back by a release.
 */
async function restartMs(db: BenchDatabase): Promise<number> {
  const executor = fromPg(db.pool);
  const store = new PgOutboxStore(executor);
  const started = performance.now();
  await prepareClaims(executor);
  const claimed = await store.claim({ owner: 'bench-restart', batchSize: 200, leaseMs: 30_000 });
  const ms = performance.now() - started;
  await store.settle(
    'bench-restart',
    claimed.map((m) => ({ rowId: m.rowId!, kind: 'release' as const })),
    { deadLettersBlock: true, leaseMs: 30_000 },
  );
  return ms;
}

/** Dispatches `history` messages in chunks: what happened since the snapshot was taken. */
async function dispatchHistory(
  db: BenchDatabase,
  history: number,
  label: string,
  dispatcher: ReturnType<typeof benchDispatcher>,
) {
  for (let done = 0; done < history; done += HISTORY_CHUNK) {
    const n = Math.min(HISTORY_CHUNK, history - done);
    await insertMessages(db, n);
    await drainRate(db, n, dispatcher);
    if ((done + n) % 200_000 === 0 || done + n === history)
      log(`held snapshot: ${label} ${(done + n).toLocaleString('en-US')} dispatched`);
  }
}

/** `samples` claims of 200, each settled before the next (as the dispatcher does). */
async function claimLatency(db: BenchDatabase, samples: number): Promise<Percentiles> {
  await insertMessages(db, samples * 200);
  const store = new PgOutboxStore(fromPg(db.pool));
  const ms: number[] = [];
  for (let i = 0; i < samples; i++) {
    const owner = `bench-claim#${i}`;
    const started = performance.now();
    const claimed = await store.claim({ owner, batchSize: 200, leaseMs: 30_000 });
    ms.push(performance.now() - started);
    if (claimed.length !== 200) throw new Error(`bench: claimed ${claimed.length} of 200`);
    await store.settle(
      owner,
      claimed.map((m) => ({ rowId: m.rowId!, kind: 'published' as const })),
      { deadLettersBlock: true, leaseMs: 30_000 },
    );
  }
  return percentiles(ms);
}

export async function heldSnapshot(
  held: BenchDatabase,
  plain: BenchDatabase,
  size: { history: number; samples: number; backlog: number; peerHistory: number },
) {
  const holder = new pg.Client({ connectionString: held.url });
  await holder.connect();
  try {
    await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await holder.query('SELECT count(*) FROM outbox');
    const claim: Record<'held' | 'plain', Percentiles> = {} as never;
    const restart: Record<'held' | 'plain', number> = {} as never;
    const sides = [
      ['held', held],
      ['plain', plain],
    ] as const;
    const running = { held: benchDispatcher(held), plain: benchDispatcher(plain) };
    for (const [label, db] of sides) {
      await dispatchHistory(db, size.history, label, running[label]);
      claim[label] = await claimLatency(db, size.samples);
    }
    // The drains in back-to-back pairs, which side first alternating, the figure the median of
    // the pairs' ratios: until 2026-12-04 one drain of each side, minutes apart (the plain side's
    // history between them), so the ratio measured how the shared machine's load moved in those
    // minutes as much as the snapshot (0.78–1.03 with the same code).
    const pairs: { held: number; plain: number }[] = [];
    for (let p = 0; p < DRAIN_PAIRS; p++) {
      const pair = {} as { held: number; plain: number };
      for (const [label, db] of p % 2 === 0 ? sides : [...sides].reverse()) {
        await insertMessages(db, size.backlog);
        pair[label] = await drainRate(db, size.backlog, running[label]);
      }
      pairs.push(pair);
    }
    const drain = {
      held: median(pairs.map((p) => p.held)),
      plain: median(pairs.map((p) => p.plain)),
    };
    const drainRatio = median(pairs.map((p) => p.held / p.plain));
    for (const [label, db] of sides) {
      await insertMessages(db, 200);
      restart[label] = await restartMs(db);
      await drainRate(db, 200);
      log(
        `held snapshot: ${label} claim p50 ${round(claim[label].p50)} ms, drain ${Math.round(drain[label])} msg/s (pairs: ${pairs.map((p) => Math.round(p[label])).join(', ')}), a dispatcher's start ${Math.round(restart[label])} ms`,
      );
    }
    // The peers, in the held database, under the same snapshot. A peer that does not finish
    // is reported as such (null), not allowed to take the run's other figures with it.
    const peer = async (name: string, run: () => Promise<number>) => {
      try {
        return await run();
      } catch (error) {
        log(`held snapshot: ${name} did not finish: ${(error as Error).message}`);
        return null;
      }
    };
    const graphileWorker = await peer('graphile-worker', async () => {
      await graphileRate(held, size.peerHistory);
      return graphileRate(held, size.backlog, { truncate: false });
    });
    const queue = 'held_snapshot_noop';
    const pgBoss = await peer('pg-boss', async () => {
      await pgBossRate(held, size.peerHistory, 4, queue);
      return pgBossRate(held, size.backlog, 4, queue);
    });
    const stillHeld = await holder.query<{ xmin: string }>(
      `SELECT backend_xmin::text AS xmin FROM pg_stat_activity WHERE pid = pg_backend_pid()`,
    );
    if (!stillHeld.rows[0]?.xmin) throw new Error('bench: the held snapshot was not held');
    return {
      claimRatio: round(claim.held.p50 / claim.plain.p50),
      drainRatio: round(drainRatio),
      drainPairs: pairs.map((p) => ({ held: Math.round(p.held), plain: Math.round(p.plain) })),
      vsGraphileWorker: graphileWorker ? round(drain.held / graphileWorker) : null,
      vsPgBoss: pgBoss ? round(drain.held / pgBoss) : null,
      perSecond: {
        ours: Math.round(drain.held),
        oursWithoutSnapshot: Math.round(drain.plain),
        graphileWorker: graphileWorker === null ? null : Math.round(graphileWorker),
        pgBoss: pgBoss === null ? null : Math.round(pgBoss),
      },
      held: {
        claimMs: claim.held,
        drainPerSecond: Math.round(drain.held),
        restartMs: Math.round(restart.held),
      },
      plain: {
        claimMs: claim.plain,
        drainPerSecond: Math.round(drain.plain),
        restartMs: Math.round(restart.plain),
      },
      size,
    };
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    await holder.end();
  }
}

/**
 * The keys of issue 25, each case on databases created for it (`fresh`, main.ts's
 * onFreshDatabase); `names` limits them (`--only held_snapshot,wal`).
 */
export async function busyDatabaseCases(
  fresh: <T>(suffix: string, fn: (db: BenchDatabase) => Promise<T>) => Promise<T>,
  size: {
    heldHistory: number;
    heldSamples: number;
    heldBacklog: number;
    heldPeerHistory: number;
    walMessages: number;
  },
  names: Set<string> | null,
) {
  const held =
    !names || names.has('held_snapshot')
      ? await fresh('held', (heldDb) =>
          fresh('held_none', (plainDb) =>
            heldSnapshot(heldDb, plainDb, {
              history: size.heldHistory,
              samples: size.heldSamples,
              backlog: size.heldBacklog,
              peerHistory: size.heldPeerHistory,
            }),
          ),
        )
      : null;
  // The claim engine's WAL per message, in details only: `wal_per_message_ratio` is measured on
  // the engine a new schema runs on (lanes, bench/cases/pgq.ts) since session 33.
  const wal =
    !names || names.has('wal')
      ? await fresh('wal', (walDb) => walPerMessage(walDb, size.walMessages))
      : null;
  return {
    keys: {
      held_snapshot_claim_ratio: held?.claimRatio ?? null,
      held_snapshot_drain_ratio: held?.drainRatio ?? null,
      held_snapshot_vs_graphile_worker: held?.vsGraphileWorker ?? null,
      held_snapshot_vs_pg_boss: held?.vsPgBoss ?? null,
    },
    details: { held, wal },
  };
}

/** The rows of main.ts's table for {@link busyDatabaseCases}' keys. */
export function busyDatabaseRows(r: Record<string, unknown>): string[] {
  const d = r.details as {
    held: Awaited<ReturnType<typeof heldSnapshot>> | null;
    wal: Awaited<ReturnType<typeof walPerMessage>> | null;
  };
  const row = (key: string, baseline: string, target: string) =>
    `| ${key} | ${r[key] === null || r[key] === undefined ? 'n/a' : String(r[key])} | ${baseline} | ${target} |`;
  const h = d.held;
  return [
    row(
      'held_snapshot_claim_ratio',
      h
        ? `claim of 200 p50 ${h.held.claimMs.p50} ms after ${h.size.history.toLocaleString('en-US')} dispatched under a held REPEATABLE READ snapshot vs ${h.plain.claimMs.p50} ms without`
        : 'not run',
      '<= 2',
    ),
    row(
      'held_snapshot_drain_ratio',
      h
        ? `${h.perSecond.ours} vs ${h.perSecond.oursWithoutSnapshot} msg/s, a ${h.size.backlog.toLocaleString('en-US')} backlog`
        : 'not run',
      '>= 0.8',
    ),
    row(
      'held_snapshot_vs_graphile_worker',
      h
        ? `${h.perSecond.ours} vs ${h.perSecond.graphileWorker} jobs/s, both under the held snapshot (peer history ${h.size.peerHistory.toLocaleString('en-US')})`
        : 'not run',
      'reported',
    ),
    row(
      'held_snapshot_vs_pg_boss',
      h ? `${h.perSecond.ours} vs ${h.perSecond.pgBoss} jobs/s (pg-boss, 4 loops)` : 'not run',
      'reported',
    ),
  ];
}
