import type pg from 'pg';
import { randomUUID } from 'node:crypto';
import { createCdcDispatcher } from '../../src/cdc/index.js';
import { ensureSlot } from '../../src/cdc/slot.js';
import { openWalStream, type WalStream } from '../../src/cdc/wal-stream.js';
import { createListenNotifyWakeSource } from '../../src/dispatcher/wake/listen-notify.js';
import { createDispatcher, createOutbox, fromPg, type Publisher } from '../../src/index.js';
import type { BenchDatabase } from '../lib/database.js';
import { quiesce, resetOutbox } from '../lib/database.js';
import { log, percentiles, sleep, type Percentiles } from '../lib/measure.js';
import { instrumentNotify } from './latency-breakdown.js';

const outbox = createOutbox();
const PRODUCERS = 4;

/**
 * Commits one message per transaction at a steady `perSecond` from PRODUCERS connections for
 * `seconds`. `send` runs inside the open transaction; the clock starts when COMMIT is sent, so
 * every figure includes the commit itself (its WAL flush), the same for every mode.
 */
export async function steadyLoad(
  db: BenchDatabase,
  perSecond: number,
  seconds: number,
  send: (client: pg.Client, key: string) => Promise<string>,
  sentAt: Map<string, number>,
  committedAt?: Map<string, number>,
): Promise<void> {
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
        committedAt?.set(key, performance.now());
      }
    }),
  );
  await Promise.all(clients.map((c) => c.end()));
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

export function latencies(
  sentAt: Map<string, number>,
  receivedAt: Map<string, number>,
  skip: number,
) {
  const samples: number[] = [];
  let index = 0;
  for (const [key, sent] of sentAt) {
    if (index++ < skip) continue; // warm-up
    const received = receivedAt.get(key);
    if (received === undefined) throw new Error(`message ${key} never arrived`);
    samples.push(received - sent);
  }
  return percentiles(samples);
}

export async function waitFor(condition: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('bench: timed out waiting for deliveries');
    await sleep(20);
  }
}

export type LatencyMode = 'polling' | 'notify' | 'cdc' | 'raw_notify' | 'raw_cdc';

/** commit → publish percentiles for one mode at a steady rate. */
export async function latency(
  db: BenchDatabase,
  mode: LatencyMode,
  perSecond: number,
  seconds: number,
): Promise<Percentiles> {
  await resetOutbox(db.pool);
  await quiesce(db);
  const sentAt = new Map<string, number>();
  const committedAt = new Map<string, number>();
  const receivedAt = new Map<string, number>();
  const enqueue = async (client: pg.Client) => {
    // A lone message per send, committing by itself, as the peers' producers send theirs.
    const [m] = await outbox.enqueue(
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
      sentAt,
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
      sentAt,
    );
    stop = () => stream.close();
  } else if (mode === 'cdc') {
    const cdc = createCdcDispatcher({
      executor,
      replicationConnection: { connectionString: db.url },
      publisher: timingPublisher(receivedAt),
      slotName: `${db.name}_${mode}`.slice(0, 63),
    });
    await cdc.start();
    await steadyLoad(db, perSecond, seconds, enqueue, sentAt);
    stop = () => cdc.stop();
  } else {
    // Notify rounds are timed statement by statement for their breakdown (latency-breakdown.ts).
    const timeline = mode === 'notify' ? instrumentNotify(db) : undefined;
    const dispatcher = createDispatcher({
      executor: timeline?.executor ?? executor,
      publisher: timingPublisher(receivedAt),
      ...(timeline
        ? {
            pollIntervalMs: 5_000, // the fallback only
            wakeSource: createListenNotifyWakeSource({ connect: timeline.connect }),
          }
        : {}), // polling: the library default poll interval (1 s)
    });
    dispatcher.start();
    await sleep(300);
    await steadyLoad(db, perSecond, seconds, enqueue, sentAt, committedAt);
    stop = async () => {
      await dispatcher.stop();
      timeline?.finish(sentAt, committedAt, receivedAt, Math.floor(perSecond / 2));
    };
  }
  await waitFor(() => [...sentAt.keys()].every((k) => receivedAt.has(k)));
  await stop();
  const result = latencies(sentAt, receivedAt, Math.floor(perSecond / 2));
  log(`latency ${mode}: p50 ${result.p50} ms, p95 ${result.p95} ms, p99 ${result.p99} ms`);
  return result;
}
