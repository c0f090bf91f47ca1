import type pg from 'pg';
import { randomUUID } from 'node:crypto';
import { createCdcDispatcher, createLaneCdcWakeSource } from '../../src/cdc/index.js';
import { ensureSlot } from '../../src/cdc/slot.js';
import { openWalStream, type WalStream } from '../../src/cdc/wal-stream.js';
import { createListenNotifyWakeSource } from '../../src/dispatcher/wake/listen-notify.js';
import {
  createDispatcher,
  createLaneDispatcher,
  createOutbox,
  fromPg,
  type Publisher,
} from '../../src/index.js';
import type { BenchDatabase } from '../lib/database.js';
import { quiesce, resetOutbox } from '../lib/database.js';
import { log, percentiles, sleep, type Percentiles } from '../lib/measure.js';
import type { Dispatcher, LaneDispatcherOptions } from '../../src/index.js';
import { instrumentNotify } from './latency-breakdown.js';
import { instrumentLanes } from './latency-lanes.js';

const outbox = createOutbox();
/** The lanes engine's writer (migration 024, issue 43): `lanes` mode. */
const laneOutbox = createOutbox({ engine: 'lanes' });
const PRODUCERS = 4;

/**
 * When each message's COMMIT was sent and when it returned, by key, in the order sent. The
 * latency figures count from `committedAt` (issue 43): what the producer's commit costs (its WAL
 * flush, a queue of flushes on a busy server) is the same for every system and outside any
 * dispatcher's control, and a message cannot be claimed before its commit returns anyway. The
 * figures from COMMIT sent (as before 2026-12-04) are kept in `details.latencyFromCommitSent`.
 */
export interface CommitTimes {
  sentAt: Map<string, number>;
  committedAt: Map<string, number>;
}

export const commitTimes = (): CommitTimes => ({ sentAt: new Map(), committedAt: new Map() });

/**
 * Commits one message per transaction at a steady `perSecond` from PRODUCERS connections for
 * `seconds`. `send` runs inside the open transaction; `times` records when COMMIT was sent and
 * when it returned, the same for every mode and peer.
 */
export async function steadyLoad(
  db: BenchDatabase,
  perSecond: number,
  seconds: number,
  send: (client: pg.Client, key: string) => Promise<string>,
  times: CommitTimes,
): Promise<void> {
  const { sentAt, committedAt } = times;
  const clients = await Promise.all(Array.from({ length: PRODUCERS }, () => db.client()));
  const intervalMs = (1000 * PRODUCERS) / perSecond;
  const started = performance.now();
  const total = Math.floor((perSecond * seconds) / PRODUCERS);
  await Promise.all(
    clients.map(async (client, p) => {
      for (let i = 0; i < total; i++) {
        const due = started + (i + p / PRODUCERS) * intervalMs;
        const wait = due - performance.now();
        if (wait > 0) await sleep(wait);
        await client.query('BEGIN');
        const key = await send(client, `${p}-${i}`);
        sentAt.set(key, performance.now());
        await client.query('COMMIT');
        committedAt.set(key, performance.now());
      }
    }),
  );
  await Promise.all(clients.map((c) => c.end()));
}

/**
 * Asynchronous claims take nothing for a lease (30 s) after Postgres last reset its statistics
 * (a crash recovery, a new cluster's first start: sql/commit-mode.ts). A server started for the
 * bench a moment ago is waited for, and said so, rather than measured while it holds claims back.
 */
async function afterClaimGuard(db: BenchDatabase): Promise<void> {
  const { rows } = await db.pool.query<{ ms: number }>(
    `SELECT coalesce(extract(epoch FROM now() - pg_stat_get_bgwriter_stat_reset_time()) * 1000, 1e9)::float8 AS ms`,
  );
  const wait = 30_000 - rows[0]!.ms;
  if (wait > 0) {
    log(
      `latency: waiting ${Math.ceil(wait / 1000)} s, the asynchronous claims' pause after the server's last crash recovery or first start`,
    );
    await sleep(wait + 100);
  }
}

/** A publisher that timestamps each first arrival. */
function timingPublisher(receivedAt: Map<string, number>): Publisher {
  return {
    publish: async (messages) => {
      const now = performance.now();
      for (const m of messages) if (!receivedAt.has(m.id)) receivedAt.set(m.id, now);
      return messages.map(() => ({ status: 'published' as const }));
    },
  };
}

const fromCommitSent: Record<string, Percentiles[]> = {};

/** Every round's percentiles counted from COMMIT sent, by mode (main.ts puts them in `details`). */
export const latencyFromCommitSent = (): Record<string, Percentiles[]> => ({ ...fromCommitSent });

/**
 * Commit returned → first arrival percentiles of a round of `mode`, after `skip` messages of
 * warm-up; the same from COMMIT sent is kept for {@link latencyFromCommitSent}.
 */
export function latencies(
  mode: string,
  times: CommitTimes,
  receivedAt: Map<string, number>,
  skip: number,
): Percentiles {
  const fromCommit: number[] = [];
  const fromSent: number[] = [];
  let index = 0;
  for (const [key, sent] of times.sentAt) {
    if (index++ < skip) continue; // warm-up
    const received = receivedAt.get(key);
    const committed = times.committedAt.get(key);
    if (received === undefined) throw new Error(`message ${key} never arrived`);
    if (committed === undefined) throw new Error(`message ${key} has no commit time`);
    fromCommit.push(received - committed);
    fromSent.push(received - sent);
  }
  const sentFigures = percentiles(fromSent);
  (fromCommitSent[mode] ??= []).push(sentFigures);
  const result = percentiles(fromCommit);
  log(
    `latency ${mode} (commit returned → publish): p50 ${result.p50} ms, p95 ${result.p95} ms, p99 ${result.p99} ms; from COMMIT sent p50 ${sentFigures.p50}, p95 ${sentFigures.p95}`,
  );
  return result;
}

export async function waitFor(condition: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('bench: timed out waiting for deliveries');
    await sleep(20);
  }
}

/**
 * `notify`: LISTEN/NOTIFY with the dispatcher's commit options for latency, `asyncClaim` and
 * `asyncSettle` (sql/commit-mode.ts: no WAL flush wait between a commit and its publish, a pause
 * of a lease after a crash recovery); `notify_sync_claim`: the same with the defaults (claims and
 * settles wait for the flush), the figure of `latency_ms.notify` before 2026-12-04. `cdc` and
 * `cdc_sync_claim` likewise for the CDC dispatcher (it takes `asyncClaim` since 2026-12-05).
 */
export type LatencyMode =
  | 'polling'
  | 'notify'
  | 'notify_sync_claim'
  | 'cdc'
  | 'cdc_sync_claim'
  | 'raw_notify'
  | 'raw_cdc'
  | 'lanes'
  | 'lanes_cdc';

/** commit → publish percentiles for one mode at a steady rate. */
export async function latency(
  db: BenchDatabase,
  mode: LatencyMode,
  perSecond: number,
  seconds: number,
  /** `lanes` only: another dispatcher to measure (a variant, for A/B runs) and its label. */
  variant?: { label: string; create: (options: LaneDispatcherOptions) => Dispatcher },
): Promise<Percentiles> {
  await resetOutbox(db.pool);
  await quiesce(db);
  const times = commitTimes();
  const receivedAt = new Map<string, number>();
  const enqueue = async (client: pg.Client) => {
    // A lone message per send, committing by itself, as the peers' producers send theirs.
    const [m] = await (mode === 'lanes' || mode === 'lanes_cdc' ? laneOutbox : outbox).enqueue(
      fromPg(client),
      [{ topic: 'payment.charge', aggregateId: randomUUID(), payload: { at: Date.now() } }],
      { allowAutocommit: true },
    );
    return m!.messageId;
  };
  const executor = fromPg(db.pool);
  let stop: () => Promise<void>;
  if (mode === 'raw_notify') {
    // The floor: a bare NOTIFY in the committing transaction, received by a bare LISTEN.
    const listener = await db.client();
    listener.on('notification', ({ payload }) => {
      if (payload && !receivedAt.has(payload)) receivedAt.set(payload, performance.now());
    });
    await listener.query('LISTEN bench_raw');
    await steadyLoad(
      db,
      perSecond,
      seconds,
      async (client, key) => {
        await client.query(`SELECT pg_notify('bench_raw', $1)`, [key]);
        return key;
      },
      times,
    );
    stop = () => listener.end();
  } else if (mode === 'raw_cdc') {
    // The floor of CDC: a bare logical replication stream (pgoutput, the same stream code as the
    // CDC dispatcher) of a one-column table, each commit timed as it arrives — logical decoding
    // and the walsender hop, without a claim, a publisher or an outbox trigger.
    await db.pool.query(`CREATE TABLE bench_raw_cdc (id bigserial PRIMARY KEY)`);
    await db.pool.query(
      `CREATE PUBLICATION bench_raw_cdc FOR TABLE bench_raw_cdc WITH (publish = 'insert')`,
    );
    const slot = `${db.name}_raw`.slice(0, 63);
    // The slot goes with the database (BenchDatabase.drop drops its slots first).
    const { confirmedLsn } = await ensureSlot(executor, slot, db.name);
    let open: string[] = [];
    const stream: WalStream = await openWalStream({
      connection: { connectionString: db.url },
      slot,
      publication: 'bench_raw_cdc',
      schema: 'public',
      table: 'bench_raw_cdc',
      startLsn: confirmedLsn,
      handlers: {
        begin: () => (open = []),
        insert: (rowId) => open.push(rowId),
        commit: (endLsn) => {
          const now = performance.now();
          for (const id of open) if (!receivedAt.has(id)) receivedAt.set(id, now);
          open = [];
          void stream.confirm(endLsn);
        },
        keepalive: () => undefined,
        lost: (error) => log(`raw_cdc stream lost: ${error.message}`),
      },
    });
    await steadyLoad(
      db,
      perSecond,
      seconds,
      async (client) => {
        const { rows } = await client.query<{ id: string }>(
          `INSERT INTO bench_raw_cdc DEFAULT VALUES RETURNING id::text AS id`,
        );
        return rows[0]!.id;
      },
      times,
    );
    stop = () => stream.close();
  } else if (mode === 'lanes' || mode === 'lanes_cdc') {
    // The lanes engine: LISTEN wake-ups as `notify`, one call a batch (no claim, no settle per
    // message), its cursor-only commits not waiting for the flush as notify's claims and settles.
    // Timed statement by statement for its breakdown (latency-lanes.ts). `lanes_cdc`: the same
    // dispatcher woken from the WAL instead (createLaneCdcWakeSource: the producer writes no
    // NOTIFY, the commit's WAL names the messages), as `cdc` is to `notify`.
    const timeline = instrumentLanes(db, variant?.label ?? mode);
    const dispatcher = (variant?.create ?? createLaneDispatcher)({
      executor: timeline.executor,
      publisher: timingPublisher(receivedAt),
      asyncCommit: true, // as notify's asyncClaim and asyncSettle
      pollIntervalMs: 5_000, // the fallback only
      wakeSource:
        mode === 'lanes_cdc'
          ? createLaneCdcWakeSource({
              executor,
              replicationConnection: { connectionString: db.url },
              slotName: `${db.name}_lanes_cdc`.slice(0, 63),
            })
          : createListenNotifyWakeSource({ connect: timeline.connect }),
    });
    dispatcher.start();
    await sleep(mode === 'lanes_cdc' ? 1_000 : 300);
    await steadyLoad(db, perSecond, seconds, enqueue, times);
    stop = async () => {
      await dispatcher.stop();
      timeline.finish(times, receivedAt, Math.floor(perSecond / 2));
    };
  } else if (mode === 'cdc' || mode === 'cdc_sync_claim') {
    if (mode === 'cdc') await afterClaimGuard(db);
    const cdc = createCdcDispatcher({
      executor,
      replicationConnection: { connectionString: db.url },
      publisher: timingPublisher(receivedAt),
      slotName: `${db.name}_${mode}`.slice(0, 63),
      ...(mode === 'cdc' ? { asyncClaim: true, asyncSettle: true } : {}),
    });
    await cdc.start();
    await steadyLoad(db, perSecond, seconds, enqueue, times);
    stop = () => cdc.stop();
  } else {
    if (mode === 'notify') await afterClaimGuard(db);
    // Notify rounds are timed statement by statement for their breakdown (latency-breakdown.ts).
    const timeline = mode === 'polling' ? undefined : instrumentNotify(db, mode);
    const dispatcher = createDispatcher({
      executor: timeline?.executor ?? executor,
      publisher: timingPublisher(receivedAt),
      ...(mode === 'notify' ? { asyncClaim: true, asyncSettle: true } : {}),
      ...(timeline
        ? {
            pollIntervalMs: 5_000, // the fallback only
            wakeSource: createListenNotifyWakeSource({ connect: timeline.connect }),
          }
        : {}), // polling: the library default poll interval (1 s)
    });
    dispatcher.start();
    await sleep(300);
    await steadyLoad(db, perSecond, seconds, enqueue, times);
    stop = async () => {
      await dispatcher.stop();
      timeline?.finish(times, receivedAt, Math.floor(perSecond / 2));
    };
  }
  await waitFor(() => [...times.sentAt.keys()].every((k) => receivedAt.has(k)));
  await stop();
  return latencies(variant?.label ?? mode, times, receivedAt, Math.floor(perSecond / 2));
}
