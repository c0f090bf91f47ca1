import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { engineOnce } from '../admin/database-engine.js';
import { readStatus, type OutboxStatus } from '../admin/status.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import { OutboxValidationError } from '../core/errors.js';
import type { Dispatcher } from '../dispatcher/dispatcher.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { TopicLabels } from './topic-labels.js';

/** Options of {@link createOutboxMetrics}. */
export interface OutboxMetricsOptions {
  /** Where to register the metrics. Default: a new Registry (not prom-client's global one). */
  registry?: Registry;
  /** Runs the status queries behind the database gauges. A pool is fine. */
  executor?: SqlExecutor;
  /**
   * Reads the status behind the database gauges instead of `executor`: for a store that is not
   * Postgres (`() => readSqliteStatus(db)` on SQLite). Give this or `executor`.
   */
  readStatus?: () => Promise<OutboxStatus> | OutboxStatus;
  /** Schema of the outbox tables. Default `public`. */
  schema?: string;
  /**
   * Which engine's tables the database gauges read with `executor`: `'claims'` (the `outbox`
   * table, `readStatus`) or `'lanes'` (`outbox_lane_*`, `readLaneEngineStatus`: bounded,
   * estimated past 1,000 messages a lane). The counters and `/healthz` are fed by the dispatcher
   * given to `attach()` either way. Default: the schema's (`readDatabaseEngine`, migration
   * 036), read at the first refresh and kept.
   */
  engine?: 'claims' | 'lanes';
  /**
   * How often the database gauges are refreshed, in ms. Scrapes read the cached values, so ten
   * Prometheus servers scraping every second still cost one status read per interval.
   * Default 15 000.
   */
  gaugeIntervalMs?: number;
  /** Distinct `topic` label values before further topics are reported as `other`. Default 100. */
  maxTopics?: number;
  /**
   * `/healthz` fails when messages are due and nothing was dispatched for this long, in ms.
   * Default 300 000 (the stall alert's window).
   */
  healthStallMs?: number;
  /** Clock, for tests. */
  now?: () => number;
}

/** What `/healthz` reports. */
export interface OutboxHealth {
  ok: boolean;
  /** Why it is not ok, or `ok`. */
  reason: string;
  /** Backlog at the last status read (null before the first one). */
  backlog: number | null;
  /** Messages due now at the last status read. */
  dueNow: number | null;
  /**
   * Seconds without progress: since the last message dispatched, or since work was first seen
   * due after a period with none, whichever is later.
   */
  secondsWithoutProgress: number;
  /** Error of the last status read, if it failed. */
  statusError?: string;
  /**
   * The dispatcher's claims or settles are refused because the database is read-only
   * (SQLSTATE 25006), since `readOnlySeconds` ago. `/healthz` answers 503 meanwhile.
   */
  databaseReadOnly: boolean;
  readOnlySeconds?: number;
}

/** The outbox's Prometheus metrics. See {@link createOutboxMetrics}. */
export interface OutboxMetrics {
  readonly registry: Registry;
  /** Subscribes to a dispatcher's events. Returns a function that unsubscribes. */
  attach(dispatcher: Dispatcher): () => void;
  /** Reads the database gauges now (also done every `gaugeIntervalMs` once started). */
  refresh(): Promise<void>;
  /** Starts the periodic gauge refresh (first read right away). */
  start(): void;
  /** Stops the periodic refresh. */
  stop(): void;
  /** For CDC code: replication slot lag in bytes (`pg_wal_lsn_diff`), per slot. */
  setCdcSlotLagBytes(slot: string, bytes: number): void;
  /** The health verdict behind `/healthz`. */
  health(): OutboxHealth;
  /** The latest cached status, or null before the first read. */
  lastStatus(): OutboxStatus | null;
}

/** Buckets of `outbox_dispatch_latency_seconds`: 10 ms to an hour; the alert threshold 30 s is one. */
export const LATENCY_BUCKETS_SECONDS = [
  0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600,
];
/** Buckets of `outbox_delivery_attempts`; 5 is one, for the "attempts > 5" alert. */
export const ATTEMPT_BUCKETS = [1, 2, 3, 4, 5, 7, 10, 15, 20, 50];

/**
 * Prometheus metrics of an outbox (SPEC §4.8), fed by dispatcher events and by a cached status
 * read. Names follow Prometheus conventions: counters end in `_total`, gauges never do, units
 * are in the name.
 *
 * | metric | type | labels | source |
 * | --- | --- | --- | --- |
 * | `outbox_pending_messages` | gauge | | status read: undispatched, not dead |
 * | `outbox_due_messages` | gauge | | status read: pending and claimable now |
 * | `outbox_oldest_pending_age_seconds` | gauge | | status read |
 * | `outbox_dead_letter_messages` | gauge | | status read |
 * | `outbox_awaiting_approval_messages` | gauge | | status read: held, waiting for a decision |
 * | `outbox_oldest_awaiting_approval_age_seconds` | gauge | | status read |
 * | `outbox_dispatch_latency_seconds` | histogram | topic | created_at → published |
 * | `outbox_delivery_attempts` | histogram | topic | attempt number of every publish attempt |
 * | `outbox_messages_published_total` | counter | topic | publish outcomes |
 * | `outbox_publish_failures_total` | counter | topic, kind (retryable, permanent) | outcomes |
 * | `outbox_messages_dead_lettered_total` | counter | topic | dead-letter events |
 * | `outbox_messages_shadowed_total` | counter | | shadow messages settled |
 * | `outbox_cdc_slot_lag_bytes` | gauge | slot | set by CDC code |
 * | `outbox_database_read_only` | gauge | | 1 while claims or settles are refused as read-only |
 *
 * The database gauges are the same in every dispatcher process: aggregate them with `max`, the
 * counters with `sum` (see ops/prometheus/alerts.yml).
 *
 * @example
 * ```ts
 * const metrics = createOutboxMetrics({ executor: fromPg(pool) });
 * metrics.attach(dispatcher);
 * metrics.start();
 * const server = await startMetricsServer({ port: 9464, registry: metrics.registry, health: metrics.health });
 * ```
 */
export function createOutboxMetrics(options: OutboxMetricsOptions): OutboxMetrics {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  quoteIdentifier(schema);
  const intervalMs = options.gaugeIntervalMs ?? 15_000;
  const stallMs = options.healthStallMs ?? 300_000;
  for (const [name, v] of [
    ['gaugeIntervalMs', intervalMs],
    ['healthStallMs', stallMs],
  ] as const) {
    if (!Number.isInteger(v) || v < 1)
      throw new OutboxValidationError(name, `must be a positive integer, got ${v}`);
  }
  const engineOf = engineOnce(options.engine, schema);
  if (!options.executor && typeof options.readStatus !== 'function')
    throw new OutboxValidationError('executor', 'give an executor (fromPg(pool)) or readStatus');
  const now = options.now ?? Date.now;
  const registry = options.registry ?? new Registry();
  const topics = new TopicLabels(options.maxTopics ?? 100);
  const registers = [registry];

  const pending = new Gauge({
    name: 'outbox_pending_messages',
    help: 'Undispatched, not dead-lettered outbox messages (the backlog).',
    registers,
  });
  const due = new Gauge({
    name: 'outbox_due_messages',
    help: 'Backlog messages a dispatcher could claim now (not delayed, not leased).',
    registers,
  });
  const oldest = new Gauge({
    name: 'outbox_oldest_pending_age_seconds',
    help: 'Age of the oldest message in the backlog (0 when empty).',
    registers,
  });
  const dead = new Gauge({
    name: 'outbox_dead_letter_messages',
    help: 'Dead-lettered messages waiting for a replay or a decision.',
    registers,
  });
  const awaitingApproval = new Gauge({
    name: 'outbox_awaiting_approval_messages',
    help: 'Held messages waiting for a person to approve or reject them (not yet expired).',
    registers,
  });
  const oldestAwaitingApproval = new Gauge({
    name: 'outbox_oldest_awaiting_approval_age_seconds',
    help: 'How long the oldest held message has waited for a decision (0 when none waits).',
    registers,
  });
  const pausedRoutes = new Gauge({
    name: 'outbox_route_paused',
    help: 'Routes paused because their destination is down (1 per paused route; issue 27): their messages wait without attempts.',
    labelNames: ['route'] as const,
    registers,
  });
  const latency = new Histogram({
    name: 'outbox_dispatch_latency_seconds',
    help: 'Time from a message being written (created_at) to its successful publish.',
    labelNames: ['topic'] as const,
    buckets: LATENCY_BUCKETS_SECONDS,
    registers,
  });
  const attempts = new Histogram({
    name: 'outbox_delivery_attempts',
    help: 'Attempt number of every publish attempt (1 = first try).',
    labelNames: ['topic'] as const,
    buckets: ATTEMPT_BUCKETS,
    registers,
  });
  const published = new Counter({
    name: 'outbox_messages_published_total',
    help: 'Messages the broker accepted.',
    labelNames: ['topic'] as const,
    registers,
  });
  const failures = new Counter({
    name: 'outbox_publish_failures_total',
    help: 'Failed publish attempts, by kind: retryable (will retry) or permanent.',
    labelNames: ['topic', 'kind'] as const,
    registers,
  });
  const deadLettered = new Counter({
    name: 'outbox_messages_dead_lettered_total',
    help: 'Messages dead-lettered by this process.',
    labelNames: ['topic'] as const,
    registers,
  });
  const shadowed = new Counter({
    name: 'outbox_messages_shadowed_total',
    help: 'Shadow messages settled without publishing (retrofit shadow mode).',
    registers,
  });
  const slotLag = new Gauge({
    name: 'outbox_cdc_slot_lag_bytes',
    help: 'WAL bytes the CDC replication slot has not confirmed yet.',
    labelNames: ['slot'] as const,
    registers,
  });

  const readOnly = new Gauge({
    name: 'outbox_database_read_only',
    help: 'The database refuses the dispatcher writes (SQLSTATE 25006: default_transaction_read_only, maintenance, a standby): 1 until a claim or settle goes through again. Messages wait meanwhile; none is dead-lettered.',
    registers,
  });
  readOnly.set(0);

  let status: OutboxStatus | null = null;
  let readOnlySince: number | undefined;
  let statusError: string | undefined;
  let lastDispatchAt = now();
  // First status read that found work due after one that found none: the stall clock starts at
  // the later of this and the last dispatch, so work arriving after an idle hour is not a stall
  // the moment it is seen.
  let dueSince = now();
  let nothingDue = true;
  let timer: NodeJS.Timeout | undefined;
  let refreshing: Promise<void> | undefined;

  async function readOnce(): Promise<void> {
    try {
      status = options.readStatus
        ? await options.readStatus()
        : await readStatus(options.executor!, {
            schema,
            lastErrors: 1,
            engine: await engineOf(options.executor!),
          });
      statusError = undefined;
      pending.set(status.backlog);
      due.set(status.dueNow);
      oldest.set(status.oldestPendingAgeSeconds);
      dead.set(status.deadLetters);
      awaitingApproval.set(status.awaitingApproval);
      oldestAwaitingApproval.set(status.oldestAwaitingApprovalAgeSeconds);
      pausedRoutes.reset();
      for (const p of status.pausedRoutes)
        // The reason is an error text: in `outbox status`, not in a label.
        pausedRoutes.set({ route: p.route }, 1);
      if (status.dueNow === 0) nothingDue = true;
      else if (nothingDue) {
        nothingDue = false;
        dueSince = now();
      }
    } catch (error) {
      // Keep the last values: a gap would read as "backlog 0" on a dashboard.
      statusError = error instanceof Error ? error.message : String(error);
    }
  }

  function refresh(): Promise<void> {
    // One read at a time, however often refresh() is called.
    refreshing ??= readOnce().finally(() => (refreshing = undefined));
    return refreshing;
  }

  return {
    registry,
    attach(dispatcher) {
      let dispatchedBefore = dispatcher.stats().published + dispatcher.stats().shadowed;
      let shadowedBefore = dispatcher.stats().shadowed;
      const progress = () => {
        // Shadow settlements have no per-message event: count them from the stats.
        const stats = dispatcher.stats();
        if (stats.shadowed > shadowedBefore) shadowed.inc(stats.shadowed - shadowedBefore);
        shadowedBefore = stats.shadowed;
        const dispatched = stats.published + stats.shadowed;
        if (dispatched > dispatchedBefore) lastDispatchAt = now();
        dispatchedBefore = dispatched;
      };
      const off = [
        dispatcher.on('dispatcher:publish:outcome', ({ message, outcome }) => {
          const topic = topics.label(message.topic);
          attempts.observe({ topic }, message.attempts);
          if (outcome.status === 'published') {
            published.inc({ topic });
            latency.observe({ topic }, Math.max(0, (now() - message.createdAt.getTime()) / 1000));
          } else {
            failures.inc({ topic, kind: outcome.status });
          }
        }),
        dispatcher.on('dispatcher:database:read-only', () => {
          readOnlySince = now();
          readOnly.set(1);
        }),
        dispatcher.on('dispatcher:database:writable', () => {
          readOnlySince = undefined;
          readOnly.set(0);
        }),
        dispatcher.on('dispatcher:dead-letter', ({ message }) =>
          deadLettered.inc({ topic: topics.label(message.topic) }),
        ),
        // Progress, from the stats: at each settle (claim engine), and at each read (the lanes
        // engine commits a batch's outcome with its next read, one call: it has no settle).
        dispatcher.on('dispatcher:settle:success', progress),
        dispatcher.on('dispatcher:claim:success', progress),
      ];
      return () => off.forEach((unsubscribe) => unsubscribe());
    },
    refresh,
    start() {
      if (timer) return;
      void refresh();
      timer = setInterval(() => void refresh(), intervalMs);
      timer.unref();
    },
    stop() {
      clearInterval(timer);
      timer = undefined;
    },
    setCdcSlotLagBytes(slot, bytes) {
      slotLag.set({ slot }, bytes);
    },
    health() {
      const idleMs = now() - Math.max(lastDispatchAt, dueSince);
      const base = {
        backlog: status?.backlog ?? null,
        dueNow: status?.dueNow ?? null,
        secondsWithoutProgress: Math.round(idleMs / 100) / 10,
        ...(statusError !== undefined && { statusError }),
        databaseReadOnly: readOnlySince !== undefined,
        ...(readOnlySince !== undefined && {
          readOnlySeconds: Math.round((now() - readOnlySince) / 100) / 10,
        }),
      };
      // Before the stall check: it is the cause, and a stall would only follow from it.
      if (readOnlySince !== undefined)
        return {
          ok: false,
          reason: `database is read-only (SQLSTATE 25006) for ${Math.round((now() - readOnlySince) / 1000)}s: claims and settles are refused; messages wait and go out once it accepts writes`,
          ...base,
        };
      // Due, not merely pending: a message delayed an hour is not a stall.
      if (status && status.dueNow > 0 && idleMs > stallMs)
        return {
          ok: false,
          reason: `${status.dueNow} messages due and none dispatched for ${Math.round(idleMs / 1000)}s`,
          ...base,
        };
      return { ok: true, reason: 'ok', ...base };
    },
    lastStatus: () => status,
  };
}
