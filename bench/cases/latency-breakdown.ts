import type pg from 'pg';
import { randomUUID } from 'node:crypto';
import type { ListenClient } from '../../src/dispatcher/wake/listen-notify.js';
import { createOutbox, fromPg, type SqlExecutor } from '../../src/index.js';
import type { BenchDatabase } from '../lib/database.js';
import { quiesce, resetOutbox } from '../lib/database.js';
import {
  log,
  medianPercentiles,
  percentiles,
  round,
  sleep,
  type Percentiles,
} from '../lib/measure.js';
import {
  commitTimes,
  latencies,
  latencyFromCommitSent,
  steadyLoad,
  waitFor,
  type CommitTimes,
} from './latency.js';
import { lanesBreakdowns } from './latency-lanes.js';

/**
 * Issue 43, latency: where the milliseconds of `latency_ms.notify` go, and the floor of a
 * claim-based design (`latency_ms.raw_claim`).
 *
 * The breakdown is taken from the notify rounds themselves (latency.ts wraps the dispatcher's
 * executor and its LISTEN connection with {@link instrumentNotify}; a timestamp per statement and
 * per notification, microseconds of cost). For each message (after the warm-up), from COMMIT sent
 * to the publisher's call:
 *
 * - `commit`: COMMIT sent → COMMIT answered (the message cannot be claimed before);
 * - then, until the claim that returned it starts, each instant counted once, in this order:
 *   `claimInTheWay` (a claim that started too early to see it was running), `waiterWrite` (the
 *   wake source arming: its waiter-row upsert), `settleInTheWay` (a settle was running and no
 *   claim: the loop waiting for it, as `pipeline.settling` makes it), `otherStatement` (another
 *   statement of the dispatcher: the route gate's read of paused routes and limits, the
 *   approvals' expiry sweep, the preparation), `wakeUp` (nothing running
 *   until the first notification after the commit arrived), `eventLoop` (nothing of the above:
 *   JavaScript, timers, the event loop);
 * - `claim`: that claim, sent → rows back;
 * - `publishCall`: rows back → the publisher's call (route gate, spans, the event loop).
 *
 * The parts add up to the latency of each message; `details.latencyBreakdown` has their means
 * over all messages and over the slowest 5 %, per notify round.
 */

/** One timed statement or notification of the dispatcher. */
export interface Span {
  start: number;
  end: number;
}

/** The parts of one message's latency, ms. */
export interface LatencyParts {
  commit: number;
  claimInTheWay: number;
  waiterWrite: number;
  settleInTheWay: number;
  otherStatement: number;
  wakeUp: number;
  eventLoop: number;
  claim: number;
  publishCall: number;
}

const PARTS: (keyof LatencyParts)[] = [
  'commit',
  'claimInTheWay',
  'waiterWrite',
  'settleInTheWay',
  'otherStatement',
  'wakeUp',
  'eventLoop',
  'claim',
  'publishCall',
];

/** The breakdown of one notify round. */
export interface LatencyBreakdown {
  /** `notify` or `notify_sync_claim` (latency.ts). */
  mode?: string;
  messages: number;
  /** From COMMIT sent, as the parts add up (`commit` included). */
  latency: Percentiles;
  /** From COMMIT returned, as `latency_ms` counts (the parts without `commit`). */
  afterCommit: Percentiles;
  /** Mean of each part over all messages, ms. */
  mean: LatencyParts;
  /** Mean of each part over the slowest 5 % of messages, ms. */
  slowest5pct: LatencyParts;
  /** Claims that returned something: duration percentiles, ms, and messages per claim. */
  claims: { ms: Percentiles; count: number; meanMessages: number; empty: number };
  settles: { ms: Percentiles; count: number };
  otherStatements: { ms: Percentiles; count: number };
  waiterWrites: number;
  notifications: number;
}

const breakdowns: LatencyBreakdown[] = [];

/** The breakdowns of the notify rounds run so far (main.ts puts them in `details`). */
export const notifyBreakdowns = (): LatencyBreakdown[] => [...breakdowns];

/** The claim's statement (sql/claim.ts, sql/tenant-claim.ts). */
const isClaim = (text: string) => text.includes('outbox_claim(');
/** A settle, release or defer (sql/settle.ts, sql/defer.ts). */
const isSettle = (text: string) => /outbox_settle|lease_owner|_defer/.test(text);
/** The wake source's arming (sql/notify.ts upsertWaiterSql). */
const isWaiterUpsert = (text: string) => text.includes('INSERT INTO') && text.includes('waiters');

/**
 * Wraps what the notify dispatcher of latency.ts runs on, and turns its timestamps into a
 * {@link LatencyBreakdown} (kept for {@link notifyBreakdowns}) once the round is over.
 */
export function instrumentNotify(db: BenchDatabase, mode: string) {
  const claims: (Span & { ids: string[] })[] = [];
  const settles: Span[] = [];
  const others: Span[] = [];
  const waiters: Span[] = [];
  const notifications: number[] = [];
  const inner = fromPg(db.pool);
  const executor: SqlExecutor = {
    query: async <Row>(text: string, values?: readonly unknown[], options?: object) => {
      const start = performance.now();
      const result = await inner.query<Row>(text, values, options);
      const end = performance.now();
      if (isClaim(text))
        claims.push({
          start,
          end,
          ids: result.rows.map((r) => String((r as { id?: unknown }).id)),
        });
      else (isSettle(text) ? settles : others).push({ start, end });
      return result;
    },
  };
  const connect = async (): Promise<ListenClient> => {
    const client = await db.client();
    client.on('notification', () => notifications.push(performance.now()));
    const query = client.query.bind(client) as (
      text: string,
      values?: unknown[],
    ) => Promise<unknown>;
    return Object.assign(client, {
      query: async (text: string, values?: unknown[]) => {
        const start = performance.now();
        const result = await query(text, values);
        if (typeof text === 'string' && isWaiterUpsert(text))
          waiters.push({ start, end: performance.now() });
        return result;
      },
    }) as unknown as ListenClient;
  };
  const finish = (times: CommitTimes, receivedAt: Map<string, number>, skip: number) => {
    const breakdown = breakDown(
      { claims, settles, others, waiters, notifications },
      times,
      receivedAt,
      skip,
    );
    breakdowns.push({ mode, ...breakdown });
    const m = breakdown.mean;
    log(
      `latency ${mode}, mean ms: commit ${m.commit}, claim in the way ${m.claimInTheWay}, waiter ${m.waiterWrite}, settle in the way ${m.settleInTheWay}, other statements ${m.otherStatement}, wake-up ${m.wakeUp}, event loop ${m.eventLoop}, claim ${m.claim}, publish call ${m.publishCall}`,
    );
    return breakdown;
  };
  return { executor, connect, finish };
}

/** The spans of `spans` (sorted by start) that overlap [from, to]. */
export function overlapping(spans: readonly Span[], from: number, to: number): Span[] {
  // Spans are short and sorted by start: look back from the first that starts after `to`.
  let hi = spans.length;
  let lo = 0;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (spans[mid]!.start <= to) lo = mid + 1;
    else hi = mid;
  }
  const out: Span[] = [];
  for (let i = lo - 1; i >= 0 && out.length < 64; i--) {
    const s = spans[i]!;
    if (s.end >= from) out.push(s);
    else if (from - s.start > 10_000) break;
  }
  return out;
}

/**
 * Splits [from, to] between labelled span lists, earlier lists first: each instant counts for
 * the first list with a span covering it; what none covers is returned as `rest`.
 */
export function splitWindow(from: number, to: number, lists: readonly (readonly Span[])[]) {
  const covered = lists.map(() => 0);
  if (to <= from) return { covered, rest: 0 };
  const spansPerList = lists.map((spans) => overlapping(spans, from, to));
  const cuts = new Set<number>([from, to]);
  for (const spans of spansPerList)
    for (const s of spans) {
      if (s.start > from && s.start < to) cuts.add(s.start);
      if (s.end > from && s.end < to) cuts.add(s.end);
    }
  const points = [...cuts].sort((a, b) => a - b);
  let rest = 0;
  for (let i = 0; i + 1 < points.length; i++) {
    const a = points[i]!;
    const b = points[i + 1]!;
    const mid = (a + b) / 2;
    const list = spansPerList.findIndex((spans) =>
      spans.some((s) => s.start <= mid && s.end >= mid),
    );
    if (list >= 0) covered[list]! += b - a;
    else rest += b - a;
  }
  return { covered, rest };
}

function breakDown(
  timeline: {
    claims: (Span & { ids: string[] })[];
    settles: Span[];
    others: Span[];
    waiters: Span[];
    notifications: number[];
  },
  { sentAt, committedAt }: CommitTimes,
  receivedAt: Map<string, number>,
  skip: number,
): LatencyBreakdown {
  const byStart = (a: Span, b: Span) => a.start - b.start;
  const claims = [...timeline.claims].sort(byStart);
  const settles = [...timeline.settles].sort(byStart);
  const waiters = [...timeline.waiters].sort(byStart);
  const otherStatements = [...timeline.others].sort(byStart);
  const notifications = [...timeline.notifications].sort((a, b) => a - b);
  const claimOf = new Map<string, Span>();
  for (const c of claims) for (const id of c.ids) if (!claimOf.has(id)) claimOf.set(id, c);
  const rows: { latency: number; parts: LatencyParts }[] = [];
  let index = 0;
  for (const [key, sent] of sentAt) {
    if (index++ < skip) continue;
    const committed = committedAt.get(key);
    const published = receivedAt.get(key);
    const claim = claimOf.get(key);
    if (committed === undefined || published === undefined || !claim) continue;
    const before = Math.max(committed, Math.min(claim.start, published));
    const others = claims.filter((c) => c !== claim);
    const notifiedAt = notifications.find((t) => t >= committed) ?? Infinity;
    // No notification before the claim: the loop was not asleep, nothing to wake it from.
    const waitEnd = notifiedAt <= before ? notifiedAt : committed;
    const lists = [others, waiters, settles, otherStatements];
    const split = splitWindow(committed, before, lists);
    // What no statement covers: waiting for the notification until it came, the event loop after.
    const uncoveredUntilNotified = splitWindow(committed, waitEnd, lists).rest;
    const parts: LatencyParts = {
      commit: committed - sent,
      claimInTheWay: split.covered[0]!,
      waiterWrite: split.covered[1]!,
      settleInTheWay: split.covered[2]!,
      otherStatement: split.covered[3]!,
      wakeUp: uncoveredUntilNotified,
      eventLoop: split.rest - uncoveredUntilNotified,
      claim: Math.max(0, Math.min(claim.end, published) - Math.max(claim.start, committed)),
      publishCall: published - Math.max(claim.end, committed),
    };
    rows.push({ latency: published - sent, parts });
  }
  const meanOf = (subset: typeof rows): LatencyParts =>
    Object.fromEntries(
      PARTS.map((p) => [
        p,
        round(subset.reduce((sum, r) => sum + r.parts[p], 0) / Math.max(1, subset.length), 3),
      ]),
    ) as unknown as LatencyParts;
  const sorted = [...rows].sort((a, b) => a.latency - b.latency);
  const slowest = sorted.slice(Math.floor(sorted.length * 0.95));
  const full = claims.filter((c) => c.ids.length > 0);
  return {
    messages: rows.length,
    latency: percentiles(rows.map((r) => r.latency)),
    afterCommit: percentiles(rows.map((r) => r.latency - r.parts.commit)),
    mean: meanOf(rows),
    slowest5pct: meanOf(slowest),
    claims: {
      ms: percentiles(full.map((c) => c.end - c.start)),
      count: full.length,
      meanMessages: round(full.reduce((s, c) => s + c.ids.length, 0) / Math.max(1, full.length)),
      empty: claims.length - full.length,
    },
    settles: { ms: percentiles(settles.map((s) => s.end - s.start)), count: settles.length },
    otherStatements: {
      ms: percentiles(otherStatements.map((s) => s.end - s.start)),
      count: otherStatements.length,
    },
    waiterWrites: waiters.length,
    notifications: notifications.length,
  };
}

const outbox = createOutbox();

/**
 * `latency_ms.raw_claim`: the floor of a claim-based design, with the same producers (our writer,
 * one message per transaction, as latency.ts's notify mode) and the same wake-up (migration 005's
 * trigger notifies every commit: a waiter row that never expires). A bare loop on one connection
 * LISTENs; on a notification it leases the pending rows by primary key, lowest first (one UPDATE,
 * FOR UPDATE SKIP LOCKED, through a partial index of its own on pending ids, at most 200: at
 * 1,000 msg/s that is one or two rows), and calls the publisher, until the lease finds nothing;
 * the mark as dispatched goes on a second connection, not awaited, so no settle is in the way.
 * No ordering, attempts, fencing, tenants or gates. (One row per statement, as first written,
 * did not keep up with 1,000 msg/s on the loaded VM: p50 7–12 s, a growing backlog.)
 */
export async function rawClaimLatency(
  db: BenchDatabase,
  perSecond: number,
  seconds: number,
): Promise<Percentiles> {
  await resetOutbox(db.pool);
  await db.pool.query(
    `CREATE INDEX IF NOT EXISTS bench_raw_claim_idx ON outbox (id)
     WHERE dispatched_at IS NULL AND lease_owner IS NULL`,
  );
  await db.pool.query(
    `INSERT INTO outbox_waiters VALUES ('bench-raw-claim', clock_timestamp() + interval '1 hour')`,
  );
  await quiesce(db);
  const times = commitTimes();
  const receivedAt = new Map<string, number>();
  const listener = await db.client();
  const marker = await db.client();
  let running = true;
  let wake: (() => void) | undefined;
  let woken = false;
  /** The marks, one after the other on their connection, never awaited by the loop. */
  let marking = Promise.resolve();
  listener.on('notification', () => {
    woken = true;
    wake?.();
  });
  await listener.query('LISTEN public_outbox');
  const loop = (async () => {
    while (running) {
      if (!woken)
        await new Promise<void>((resolve) => {
          wake = resolve;
          setTimeout(resolve, 100);
        });
      woken = false;
      for (;;) {
        const { rows } = await listener.query<{ id: string; message_id: string }>(
          `UPDATE outbox SET lease_owner = 'raw', lease_expires_at = now() + interval '30 seconds'
           WHERE id IN (SELECT id FROM outbox WHERE dispatched_at IS NULL AND lease_owner IS NULL
                        ORDER BY id LIMIT 200 FOR UPDATE SKIP LOCKED)
           RETURNING id::text, message_id::text`,
        );
        if (rows.length === 0) break;
        await publish(
          rows.map((r) => r.message_id),
          receivedAt,
        );
        const ids = rows.map((r) => r.id);
        marking = marking.then(() =>
          marker
            .query(
              `UPDATE outbox SET dispatched_at = now(), lease_owner = NULL, lease_expires_at = NULL
               WHERE id = ANY($1::bigint[])`,
              [ids],
            )
            .then(
              () => undefined,
              () => undefined,
            ),
        );
      }
    }
  })();
  try {
    await sleep(300);
    await steadyLoad(
      db,
      perSecond,
      seconds,
      async (client: pg.Client) => {
        const [m] = await outbox.enqueue(
          fromPg(client),
          [{ topic: 'payment.charge', aggregateId: randomUUID(), payload: { at: Date.now() } }],
          { allowAutocommit: true },
        );
        return m!.messageId;
      },
      times,
    );
    await waitFor(() => [...times.sentAt.keys()].every((k) => receivedAt.has(k)));
  } finally {
    running = false;
    wake?.();
    await loop.catch(() => undefined);
    await marking;
    await listener.end();
    await marker.end();
  }
  return latencies('raw_claim', times, receivedAt, Math.floor(perSecond / 2));
}

/** The publisher's call of the raw loop: timestamps each first arrival, as latency.ts's. */
async function publish(ids: readonly string[], receivedAt: Map<string, number>): Promise<void> {
  await Promise.resolve();
  const now = performance.now();
  for (const id of ids) if (!receivedAt.has(id)) receivedAt.set(id, now);
}

/**
 * `--only latency`: the interleaved latency rounds of a full run (notify with its breakdown,
 * raw_claim, graphile-worker; `rounds` of them), without the rest. A full run measures them in
 * main.ts and this group does nothing there (`names` null).
 */
export async function latencyOnly(
  fresh: <T>(suffix: string, fn: (db: BenchDatabase) => Promise<T>) => Promise<T>,
  size: { latencySeconds: number; latencyRounds: number },
  names: Set<string> | null,
  modes: Record<string, (db: BenchDatabase) => Promise<Percentiles>>,
) {
  if (!names?.has('latency')) return { keys: {}, details: {} };
  const rounds: Record<string, Percentiles[]> = {};
  for (let r = 0; r < size.latencyRounds; r++)
    for (const [name, run] of Object.entries(modes))
      (rounds[name] ??= []).push(await fresh(`lat_${name}_${r}`, run));
  return {
    keys: {
      latency_ms: Object.fromEntries(
        Object.entries(rounds).map(([name, runs]) => [name, medianPercentiles(runs)]),
      ),
    },
    details: {
      latencyRounds: rounds,
      latencyBreakdown: notifyBreakdowns(),
      latencyBreakdownLanes: lanesBreakdowns(),
      latencyFromCommitSent: latencyFromCommitSent(),
    },
  };
}
