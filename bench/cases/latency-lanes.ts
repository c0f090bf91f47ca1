import type { ListenClient } from '../../src/dispatcher/wake/listen-notify.js';
import { fromPg, type SqlExecutor } from '../../src/index.js';
import type { BenchDatabase } from '../lib/database.js';
import { log, percentiles, round, type Percentiles } from '../lib/measure.js';
import { splitWindow, type Span } from './latency-breakdown.js';
import type { CommitTimes } from './latency.js';

/**
 * Issue 43, latency: where the milliseconds of `latency_ms.notify` go (the lanes engine's wake-up
 * chain), as latency-breakdown.ts does for `notify`.
 *
 * latency.ts wraps the lane dispatcher's executor and its LISTEN connection with
 * {@link instrumentLanes}: a timestamp per statement and per notification, nothing else changed.
 * Statements are told apart by their text and arguments: `outbox_lane_next` with a batch, and
 * `outbox_lane_by_ids` (what a wake-up named, read by id) (`read`), `outbox_lane_next` with none
 * (`sync`: the cursor write when going idle or before a balance), the parked path
 * (its due-heads read and `outbox_lane_settle_parked`), the rest (`outbox_lane_balance`, the
 * route gate), and on the LISTEN connection the waiter-row upsert (arming). For each message
 * (after the warm-up), from COMMIT returned to the publisher's call, each instant counted once,
 * in this order:
 *
 * - `readInTheWay`: another read running (it started too early to see the message, or it read
 *   other lanes first);
 * - `syncInTheWay`: a cursor write (`outbox_lane_next` with batch 0) running;
 * - `parkedPath`: the parked path's read or settle running;
 * - `otherStatement`: `outbox_lane_balance` or another statement of the dispatcher (the route
 *   gate's reads) running;
 * - `waiterWrite`: the wake source arming (its waiter-row upsert, awaited by the loop);
 * - `wakeUp`: nothing running until the first notification after the commit arrived;
 * - `eventLoop`: nothing of the above: JavaScript, timers, the event loop;
 * - `read`: the read that returned it, sent (or the commit, if later) → rows back;
 * - `publishCall`: rows back → the publisher's call (filtering, the event loop).
 *
 * Besides the parts, per message: `notifyAfterCommit` (commit returned → the first notification
 * after it, when one came before the read that returned the message started: the dispatcher was
 * asleep) and `notifyToRead` (that notification → the read sent). `details.latencyBreakdownLanes`
 * has, per lanes round, each part's p50/p95 and mean over all messages and its mean over the
 * slowest 5 %, and the statements' counts and durations.
 */

/** The parts of one message's latency after COMMIT returned, ms. */
export interface LaneLatencyParts {
  readInTheWay: number;
  syncInTheWay: number;
  parkedPath: number;
  otherStatement: number;
  waiterWrite: number;
  wakeUp: number;
  eventLoop: number;
  read: number;
  publishCall: number;
}

const PARTS: (keyof LaneLatencyParts)[] = [
  'readInTheWay',
  'syncInTheWay',
  'parkedPath',
  'otherStatement',
  'waiterWrite',
  'wakeUp',
  'eventLoop',
  'read',
  'publishCall',
];

type PartFigures = Record<keyof LaneLatencyParts, number>;

/** The breakdown of one lanes round. */
export interface LaneLatencyBreakdown {
  mode: string;
  messages: number;
  /** COMMIT sent → COMMIT returned. */
  commit: Percentiles;
  /** COMMIT returned → publisher's call, as `latency_ms` counts (the parts add up to it). */
  afterCommit: Percentiles;
  p50: PartFigures;
  p95: PartFigures;
  mean: PartFigures;
  slowest5pct: PartFigures;
  /** Messages whose returning read started after a notification that came after their commit. */
  woken: {
    messages: number;
    notifyAfterCommit: Percentiles;
    notifyToRead: Percentiles;
  };
  /** Messages whose returning read was already running when their commit returned. */
  readInFlightAtCommit: number;
  /** Every read that returned messages: lane reads and reads by id (`byId` of them). */
  reads: { ms: Percentiles; count: number; empty: number; meanMessages: number; byId: number };
  syncs: { ms: Percentiles; count: number };
  parked: { ms: Percentiles; count: number };
  otherStatements: { ms: Percentiles; count: number };
  waiterWrites: { ms: Percentiles; count: number };
  notifications: number;
}

const breakdowns: LaneLatencyBreakdown[] = [];

/** The breakdowns of the lanes rounds run so far (main.ts puts them in `details`). */
export const lanesBreakdowns = (): LaneLatencyBreakdown[] => [...breakdowns];

const isNext = (text: string) => text.includes('outbox_lane_next(');
/** The read of what a wake-up named (sql/lanes.ts `outbox_lane_by_ids`): a read by id. */
const isByIds = (text: string) => text.includes('outbox_lane_by_ids(');
const isParked = (text: string) =>
  text.includes('outbox_lane_settle_parked(') || text.includes('outbox_lane_parked q');
const isWaiterUpsert = (text: string) => text.includes('INSERT INTO') && text.includes('waiters');

/**
 * Wraps what the lane dispatcher of latency.ts runs on, and turns its timestamps into a
 * {@link LaneLatencyBreakdown} (kept for {@link lanesBreakdowns}) once the round is over.
 */
export function instrumentLanes(db: BenchDatabase, mode = 'lanes') {
  const reads: (Span & { ids: string[]; byId?: boolean })[] = [];
  const syncs: Span[] = [];
  const parked: Span[] = [];
  const others: Span[] = [];
  const waiters: Span[] = [];
  const notifications: number[] = [];
  const inner = fromPg(db.pool);
  const executor: SqlExecutor = {
    query: async <Row>(text: string, values?: readonly unknown[], options?: object) => {
      const start = performance.now();
      const result = await inner.query<Row>(text, values, options);
      const end = performance.now();
      const ids = () =>
        result.rows
          .map((r) => (r as { message_id?: string | null }).message_id)
          .filter((id): id is string => typeof id === 'string');
      if (isByIds(text)) reads.push({ start, end, ids: ids(), byId: true });
      else if (isNext(text)) {
        if (Number(values?.[10] ?? 0) > 0) reads.push({ start, end, ids: ids() });
        else syncs.push({ start, end });
      } else (isParked(text) ? parked : others).push({ start, end });
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
    const breakdown = breakDownLanes(
      mode,
      { reads, syncs, parked, others, waiters, notifications },
      times,
      receivedAt,
      skip,
    );
    breakdowns.push(breakdown);
    const f = (p: PartFigures) => PARTS.map((k) => `${k} ${p[k]}`).join(', ');
    log(`latency ${mode} breakdown, p50 ms: ${f(breakdown.p50)}`);
    log(`latency ${mode} breakdown, p95 ms: ${f(breakdown.p95)}`);
    log(`latency ${mode} breakdown, mean ms: ${f(breakdown.mean)}`);
    log(
      `latency ${mode}: woken ${breakdown.woken.messages}/${breakdown.messages} (commit → notification p50 ${breakdown.woken.notifyAfterCommit.p50}, p95 ${breakdown.woken.notifyAfterCommit.p95}; notification → read sent p50 ${breakdown.woken.notifyToRead.p50}, p95 ${breakdown.woken.notifyToRead.p95}); reads ${breakdown.reads.count} (${breakdown.reads.byId} by id; +${breakdown.reads.empty} empty, p50 ${breakdown.reads.ms.p50} ms), syncs ${breakdown.syncs.count}, parked path ${breakdown.parked.count}, waiter writes ${breakdown.waiterWrites.count}, notifications ${breakdown.notifications}`,
    );
    return breakdown;
  };
  return { executor, connect, finish };
}

function breakDownLanes(
  mode: string,
  timeline: {
    reads: (Span & { ids: string[]; byId?: boolean })[];
    syncs: Span[];
    parked: Span[];
    others: Span[];
    waiters: Span[];
    notifications: number[];
  },
  { sentAt, committedAt }: CommitTimes,
  receivedAt: Map<string, number>,
  skip: number,
): LaneLatencyBreakdown {
  const byStart = (a: Span, b: Span) => a.start - b.start;
  const reads = [...timeline.reads].sort(byStart);
  const syncs = [...timeline.syncs].sort(byStart);
  const parked = [...timeline.parked].sort(byStart);
  const others = [...timeline.others].sort(byStart);
  const waiters = [...timeline.waiters].sort(byStart);
  const notifications = [...timeline.notifications].sort((a, b) => a - b);
  const readOf = new Map<string, Span>();
  for (const r of reads) for (const id of r.ids) if (!readOf.has(id)) readOf.set(id, r);
  const firstAtOrAfter = (t: number) => {
    let lo = 0;
    let hi = notifications.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (notifications[mid]! < t) lo = mid + 1;
      else hi = mid;
    }
    return notifications[lo] ?? Infinity;
  };
  const rows: { latency: number; parts: LaneLatencyParts }[] = [];
  const commits: number[] = [];
  const notifyAfterCommit: number[] = [];
  const notifyToRead: number[] = [];
  let inFlight = 0;
  let index = 0;
  for (const [key, sent] of sentAt) {
    if (index++ < skip) continue;
    const committed = committedAt.get(key);
    const published = receivedAt.get(key);
    const read = readOf.get(key);
    if (committed === undefined || published === undefined || !read) continue;
    const before = Math.max(committed, Math.min(read.start, published));
    if (read.start < committed) inFlight++;
    const notifiedAt = firstAtOrAfter(committed);
    // No notification before the read: the loop was not asleep, nothing to wake it from.
    const woken = notifiedAt <= before;
    const waitEnd = woken ? notifiedAt : committed;
    if (woken) {
      notifyAfterCommit.push(notifiedAt - committed);
      notifyToRead.push(read.start - notifiedAt);
    }
    // The message's own read never covers [committed, before]: it starts at `before` or later.
    const lists = [reads, syncs, parked, others, waiters];
    const split = splitWindow(committed, before, lists);
    const uncoveredUntilNotified = splitWindow(committed, waitEnd, lists).rest;
    const parts: LaneLatencyParts = {
      readInTheWay: split.covered[0]!,
      syncInTheWay: split.covered[1]!,
      parkedPath: split.covered[2]!,
      otherStatement: split.covered[3]!,
      waiterWrite: split.covered[4]!,
      wakeUp: uncoveredUntilNotified,
      eventLoop: split.rest - uncoveredUntilNotified,
      read: Math.max(0, Math.min(read.end, published) - Math.max(read.start, committed)),
      publishCall: published - Math.max(read.end, committed),
    };
    commits.push(committed - sent);
    rows.push({ latency: published - committed, parts });
  }
  const figures = (subset: typeof rows, of: (values: number[]) => number): PartFigures =>
    Object.fromEntries(
      PARTS.map((p) => [p, round(of(subset.map((r) => r.parts[p])), 3)]),
    ) as unknown as PartFigures;
  const mean = (values: number[]) => values.reduce((s, v) => s + v, 0) / Math.max(1, values.length);
  const quantile = (q: number) => (values: number[]) => {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] ?? NaN;
  };
  const sorted = [...rows].sort((a, b) => a.latency - b.latency);
  const slowest = sorted.slice(Math.floor(sorted.length * 0.95));
  const full = reads.filter((r) => r.ids.length > 0);
  const spans = (list: readonly Span[]) => ({
    ms: percentiles(list.map((s) => s.end - s.start)),
    count: list.length,
  });
  return {
    mode,
    messages: rows.length,
    commit: percentiles(commits),
    afterCommit: percentiles(rows.map((r) => r.latency)),
    p50: figures(rows, quantile(0.5)),
    p95: figures(rows, quantile(0.95)),
    mean: figures(rows, mean),
    slowest5pct: figures(slowest, mean),
    woken: {
      messages: notifyAfterCommit.length,
      notifyAfterCommit: percentiles(notifyAfterCommit),
      notifyToRead: percentiles(notifyToRead),
    },
    readInFlightAtCommit: inFlight,
    reads: {
      ms: percentiles(full.map((r) => r.end - r.start)),
      count: full.length,
      empty: reads.length - full.length,
      meanMessages: round(full.reduce((s, r) => s + r.ids.length, 0) / Math.max(1, full.length)),
      byId: full.filter((r) => r.byId).length,
    },
    syncs: spans(syncs),
    parked: spans(parked),
    otherStatements: spans(others),
    waiterWrites: spans(waiters),
    notifications: notifications.length,
  };
}
