import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { backoffDelayMs } from '../core/backoff.js';
import { OutboxPoolerError, OutboxValidationError } from '../core/errors.js';
import { quoteIdentifier } from '../core/identifier.js';
import type { JsonValue } from '../core/message.js';
import { emptyStats, statsSince, type DispatcherStats } from '../dispatcher/dispatcher-stats.js';
import type { Dispatcher, DispatcherState, DrainResult } from '../dispatcher/dispatcher.js';
import { TypedEmitter, type DispatcherEventMap } from '../dispatcher/events.js';
import { watchReadOnly } from '../dispatcher/read-only-watch.js';
import { IdleTracker } from '../dispatcher/idle-tracker.js';
import { resolveDispatcherOptions, type ResolvedDispatcherOptions } from '../dispatcher/options.js';
import { startBatchTrace, type BatchTrace } from '../dispatcher/dispatch-spans.js';
import { publishInOrder, type MessageFate } from '../dispatcher/ordered-publish.js';
import { WakeUps } from '../dispatcher/wake-ups.js';
import type { WakeSource } from '../dispatcher/wake-source.js';
import { LANE_COUNT } from '../migrations/024-lanes.js';
import type { OutgoingMessage, Publisher } from '../publishers/publisher.js';
import { laneExpireSql } from '../sql/lane-approvals.js';
import { claimEnginePendingAggregatesSql } from '../sql/status.js';
import {
  laneByIdsSql,
  laneByIdsUnpreparedSql,
  laneDueSql,
  laneNextParkedDueSql,
  laneLeaveSql,
  laneNextCallSql,
  lanePreArmWritersSql,
} from '../sql/lanes.js';
import { LaneDispatcherGroup, shareWakeSource } from './lane-dispatcher-group.js';
import { lastRegularLane, withShares } from './lane-shares.js';
import { PreArmWriters, type PreArmProbe } from './pre-arm-writers.js';
import { isSqlExecutor, type SqlExecutor } from '../store/sql-executor.js';
import { preparable } from '../store/statement-name.js';
import type { BackoffOptions } from '../core/backoff.js';
import type { DeadLetterPolicy } from '../dispatcher/options.js';
import type { RoutePauseOptions } from '../dispatcher/destination-limits.js';
import type { Settlement as Plan } from '../dispatcher/outbox-store.js';
import { declareRateLimits, type RateLimit } from '../dispatcher/rate-limits.js';
import { RouteGate } from '../dispatcher/route-gate.js';

/** Options of {@link createLaneDispatcher}. */
export interface LaneDispatcherOptions {
  /** Where the lanes live: a pool (each batch is one autocommitted call; poolers work). */
  executor: SqlExecutor;
  publisher: Publisher;
  /** Schema holding the outbox tables. Default `public`. */
  schema?: string;
  /** Identifies this dispatcher as the owner of its lanes. Default `<host>:<pid>:<random>`. */
  id?: string;
  /** Messages read and published per batch. Default 500. */
  batchSize?: number;
  /**
   * How long this dispatcher owns its lanes without renewing, in ms. Default 30 000. A dispatcher
   * killed without a stop leaves its lanes for this long; another then takes them over.
   */
  leaseMs?: number;
  /** How long to wait after a batch found nothing, in ms. Default 200. */
  pollIntervalMs?: number;
  /** Attempts after which a failing message is dead-lettered. Default 10. */
  maxAttempts?: number;
  backoff?: Partial<BackoffOptions>;
  /**
   * `hold` (default): a dead-lettered ordered message keeps its aggregate parked until it is
   * replayed; `skip`: the aggregate goes on with its next message.
   */
  deadLetterPolicy?: DeadLetterPolicy;
  /** At most this many lanes, whatever the share. Default: all of them (16). */
  maxLanes?: number;
  /**
   * Batches in flight at once, default 1: this many lane dispatchers in the process, each with
   * its own owner id (`<id>/<n>`) and at most `maxLanes / concurrency` lanes (rounded up), so
   * one publishes while another waits for the database (lane-dispatcher-group.ts: measured,
   * one dispatcher's drain took about the sum of its own and the database's time). Each takes
   * a pool connection while it reads; give the pool `concurrency + 1` at least.
   */
  concurrency?: number;
  /** Wakes the dispatcher before the poll interval (a hint; polling stays the guarantee). */
  wakeSource?: WakeSource;
  /**
   * When a route counts as down and how long it pauses (docs/destination-limits.md), as for the
   * claim engine: a paused route's messages are parked without an attempt (G9) and one probe per
   * pause tells when it is back.
   */
  routePause?: RoutePauseOptions;
  /**
   * Rate limits declared at start, one limit for every dispatcher of the database together (as
   * the claim engine's `rateLimits`); a message without a token is parked without an attempt
   * until its token is due.
   */
  rateLimits?: readonly RateLimit[];
  /**
   * Commit a batch's cursor moves without waiting for the WAL flush (as `asyncSettle` does for
   * the claim engine): lower latency; a database crash can lose the last moves, and their
   * messages are then published again, in order, with the same message ids. Calls that park a
   * failure or renew a lease still wait. Default false.
   */
  asyncCommit?: boolean;
  /**
   * Asked before each batch of {@link Dispatcher.drain}: true ends the drain there, as when a
   * batch finds nothing (the batch in flight published, its outcome committed, the lanes given
   * back); what was not read stays after the cursors for the next drain. A fleet ends a tenant's
   * turn with it (src/fleet/). Default: a drain runs until nothing is due.
   */
  stopDrain?: () => boolean;
}

/** One row of `outbox_lane_next` or of the parked path (bigints as text). */
interface LaneRow {
  lane: number;
  id: string;
  message_id: string | null;
  aggregate_id: string;
  sequence: string | null;
  ordered: boolean;
  topic: string;
  payload: JsonValue;
  headers: Record<string, string> | null;
  /** created_at in ms since the epoch (sql/lanes.ts says why not a timestamptz). */
  created_ms: number;
  attempts?: number;
  /** A shadow message (migration 026): settled as published, never handed to the publisher. */
  shadow?: boolean | null;
  /** Published ahead of its lane's cursor by a tenant share (migration 028, lane-shares.ts). */
  share?: boolean;
}

/** What becomes of a published (or not published) message's row. */
interface Settlement {
  kind: 'published' | 'retry' | 'dead' | 'unsent' | 'defer';
  error?: string;
  delayMs?: number;
}

/** One call's rows, with the horizon that came with them (positions stop at it). */
interface Batch {
  rows: LaneRow[];
  /** The horizon's safe id (bigint as text). */
  safe: string;
  /** How far the batch examined each lane: its marker, else its last row (computed once). */
  examined?: Map<number, string>;
  /** Read ahead: while the previous batch was being published (see {@link LaneDispatcher}). */
  ahead: boolean;
}

/** What the last batch did, committed by the next call (`outbox_lane_next`). */
interface Outcome {
  lanes: number[];
  from: string[];
  to: string[];
  parkLanes: number[];
  parkIds: string[];
  parkKinds: string[];
  parkErrors: (string | null)[];
  parkDelays: (number | null)[];
  /** Messages a tenant share published (or parked) ahead of their lanes' cursors. */
  aheadLanes: number[];
  aheadIds: string[];
}

const emptyOutcome = (): Outcome => ({
  lanes: [],
  from: [],
  to: [],
  parkLanes: [],
  parkIds: [],
  parkKinds: [],
  parkErrors: [],
  parkDelays: [],
  aheadLanes: [],
  aheadIds: [],
});

/**
 * How often a running dispatcher writes its lanes' positions as their cursors, in ms. Measured
 * with a cursor move in every batch's call: a flushed commit a batch, and under a held snapshot
 * up to 16 lane-row versions a batch that every later call reads (3 -> 47 pages after 40
 * batches). Once a second bounds both by time instead of by throughput; a dispatcher killed
 * -9 publishes again at most about a second of messages (the lease it held expires first).
 */
const CURSOR_SYNC_MS = 1_000;

/** How often a lane dispatcher sweeps expired held messages (as the claim engine's default). */
const APPROVAL_SWEEP_MS = 30_000;
/**
 * How often the claim engine's table is looked at for messages a lanes message must not overtake
 * (#behindClaimEngine), and how long such a message is deferred.
 */
const CLAIMS_CHECK_MS = 5_000;
/** At most this many claim-engine rows are read a check; above it every ordered message waits. */
const CLAIMS_CAP = 10_000;
/** Held messages one sweep decides at most (as the claim engine's). */
const APPROVAL_SWEEP_BATCH = 100;

/**
 * A batch read ahead (#readAhead) is sent this long before the publish of the batch before it is
 * expected to end, beyond twice the last read's time: the read is done when the publish is, and
 * what committed meanwhile (a tenant's share, issue 43's fair share) is in it.
 */
const AHEAD_MARGIN_MS = 5;

/**
 * How long a drain waits, a stall, for the horizon to let its lanes' positions pass what it read
 * again (see #cycle): a write transaction of the database holds it while it runs.
 */
const DRAIN_HORIZON_WAIT_MS = 5_000;

/** Messages named by wake-ups a dispatcher keeps at most until it looks at them. */
const NAMED_MAX = 256;

/**
 * After messages named by wake-ups went out by id while the loop slept, the lane read that
 * moves their lanes' positions past them runs this much later, not at once: at a steady trickle
 * that read ran after every message, and a commit landing during it (about a millisecond) waited
 * for it; its p95 was the latency's (issue 43). What it defers: the cursor moves (a crash
 * publishes again what went out since, same ids, as after any unsynced batch) and the forgetting
 * of the handled ids.
 */
const HINTED_CATCH_UP_MS = 100;

/**
 * Publishes by id of what wake-ups named that run at once at most, while the loop sleeps. One at
 * a time, a NOTIFY that landed during a read by id and its publish waited for both: at 1,000
 * messages a second that wait was most of `latency_ms.notify`'s p95 tail (bench
 * `details.latencyBreakdownLanes`, `readInTheWay`). Concurrent ones keep G3 and G4 as one does:
 * a message is taken (`#handled`) in the same turn of the event loop as it is found eligible, and
 * an ordered message is eligible only when its aggregate's previous one was published
 * (`#lastPublished`), which a call still in flight has not recorded yet: then the lane read
 * publishes it, after every call in flight has ended.
 */
const HINTED_CONCURRENCY = 4;

/** Aggregates {@link LaneDispatcher}'s `#lastPublished` remembers at most. */
const LAST_PUBLISHED_MAX = 10_000;

/** A fenced lane (SQLSTATE OBX01 from sql/lanes.ts): another dispatcher owns it now. */
const isFenced = (error: unknown) => (error as { code?: string } | null)?.code === 'OBX01';

/**
 * The lanes engine's dispatcher (issue 43; migration 024 and sql/lanes.ts hold the design).
 *
 * Lifecycle, as {@link Dispatcher}'s: `created` → `running` (one loop: take its share of the
 * lanes, then batch after batch) → `stopping` (the batch in flight finishes, its outcome is
 * committed, the lanes are given back) → `stopped`.
 *
 * A batch: `outbox_lane_next` commits the previous batch's cursor moves and parked failures and
 * returns the next rows of this dispatcher's lanes; they are published as the claim engine does
 * (each aggregate in order, stopping at its first failure: ordered-publish.ts); what was not
 * published is parked by the next call. Between batches, when something may be due there (what
 * this dispatcher parked, at its due time; else at the poll cadence and at least every second),
 * the parked path publishes the due heads of parked messages (retries), one per aggregate.
 * Nothing is written per published message: one cursor move per lane and batch.
 */
class LaneDispatcher implements Dispatcher {
  readonly id: string;
  #state: DispatcherState = 'created';
  readonly #options: ResolvedDispatcherOptions;
  readonly #executor: SqlExecutor;
  readonly #publisher: Publisher;
  readonly #schema: string;
  readonly #maxLanes: number;
  readonly #asyncCommit: boolean;
  readonly #stopDrain: () => boolean;
  readonly #events = new TypedEmitter<DispatcherEventMap>();
  readonly #stats: DispatcherStats = emptyStats();
  readonly #idle = new IdleTracker(() => this.#events.emit('dispatcher:idle'));
  readonly #wakeUps: WakeUps;
  /** Paused routes and rate limits (destination-limits.ts), shared with the claim engine. */
  readonly #routes: RouteGate;
  readonly #sql: {
    next: string;
    balance: string;
    due: string;
    nextParkedDue: string;
    settleParked: string;
    leave: string;
    byIds: string;
    expire: string;
    claimsWaiting: string;
  };
  /** Cursor of each owned lane as last committed (bigint as text). */
  #cursors = new Map<number, string>();
  /**
   * How far each owned lane has been consumed (published or parked, up to the horizon): at or
   * above its committed cursor. Written to the cursor at most every {@link CURSOR_SYNC_MS}, and
   * before the lanes are given back or rebalanced: most batches then commit nothing at all (a
   * read-only call: no WAL, no flush, no lane-row version for a held snapshot to keep). What a
   * crash loses is published again, in order, with the same message ids (G2, G3).
   */
  #positions = new Map<number, string>();
  #syncAt = 0;
  /**
   * Rows published or parked above their lane's cursor (the cursor waits for the horizon): a
   * later read returns them again, and they are skipped. Dropped as the cursor passes them.
   */
  #handled = new Map<number, Set<string>>();
  /** The horizon (sql/lanes.ts `outbox_lane_horizon`): safe id and the pending pair. */
  #horizon = { safe: '0', pairId: '0', pairXid: '0' };
  /** Each lane's tenant cursor: the last tenant its shares visited (lane-shares.ts). */
  #tenantAfter = new Map<number, string>();
  /** When the last balance (which renews every owned lease to leaseMs) was sent. */
  #renewedAt = 0;
  #balanceAt = 0;
  /** When the parked path is looked at next (epoch ms; 0: at the next cycle). */
  #parkedAt = 0;
  /**
   * When the first parked head of the owned lanes comes due, as the database said after a look
   * that found none due (epoch ms; Infinity: none parked). An idle dispatcher wakes for it.
   */
  #parkedKnownDue = Infinity;
  /** The wait after the database said a parked head is due that the look did not find. */
  #overdueWaitMs = 0;
  /** When the held messages' expiry sweep is next due (see {@link #expireApprovals}). */
  #expiryAt = 0;
  /**
   * When the claim engine's table is next looked at, and what it held then: each aggregate's
   * first unpublished sequence, or 'all' when more than {@link CLAIMS_CAP} rows wait there.
   */
  #claimsCheckAt = 0;
  #claimsFirst: Map<string, number> | 'all' = new Map();
  /**
   * The last read left ids that may still commit (the horizon's pair pending, or the horizon just
   * moved, so a newer id may be pending behind it): see {@link #idleWaitMs}.
   */
  #maybeInFlight = false;
  /** The current short wait while {@link #maybeInFlight}, ms (0: none yet). */
  #inFlightWaitMs = 0;
  /**
   * Whether a writer that may send no NOTIFY is left, for the wake source's current arming
   * (pre-arm-writers.ts): once none is, the short looks of {@link #idleWaitMs} stop until the
   * next arming, and a read that found a few messages is followed by sleep ({@link #quiet}).
   */
  readonly #writers: PreArmWriters;
  #start = 0;
  #outcome = emptyOutcome();
  /**
   * The next batch, read while the current one is published (a saturated backlog only): the
   * database reads while this process publishes. Settled as a call on its own would be.
   */
  #ahead: Promise<Batch> | undefined;
  /** Sends the read ahead now if it is still waiting for its time (#readAhead). */
  #aheadNow: (() => void) | undefined;
  /** The last two saturated batches' publish times, and the last read ahead's, ms. */
  #publishMs: [number, number] = [0, 0];
  #aheadReadMs = 0;
  /** When a drain's reads began to return only what it had published, and its current wait. */
  #heldSince = 0;
  #heldWaitMs = 0;
  /**
   * Ordered aggregates (`lane:aggregate`) the last batch did not publish: their parks are not
   * committed yet when the batch after it is read ahead, so that batch's messages of them are
   * parked behind (unsent), not published.
   */
  #unpublished = new Set<string>();
  #worker: Promise<void> | undefined;
  /** True while the loop sleeps idle: nothing read, published or held in memory is in flight. */
  #sleeping = false;
  /**
   * Publishes of what wake-ups named in flight ({@link #publishHinted}, at most
   * {@link HINTED_CONCURRENCY}); the loop's next read waits for them ({@link #hintedSettled}), so
   * no lane read runs beside them.
   */
  #hinted = new Set<Promise<void>>();
  /** The deferred lane read after messages went out by id ({@link HINTED_CATCH_UP_MS}). */
  #catchUp: NodeJS.Timeout | undefined;
  /** The last batch came back full (a backlog): the wake source is disarmed then. */
  #saturated = false;
  /** What wake-ups named and is not looked at yet ({@link #publishHinted}). */
  #named: { lane: number; id: string }[] = [];
  /**
   * The last sequence this dispatcher published of an ordered aggregate (`lane:aggregate`),
   * recorded while it is not draining a backlog (a batch that was not full, the parked path, a
   * hinted publish): a wake-up may name the aggregate's next message, which then has nothing
   * before it. At most {@link LAST_PUBLISHED_MAX} entries (then forgotten: only fewer hinted
   * publishes); a failure removes its aggregate; lanes given back take theirs along.
   */
  #lastPublished = new Map<string, number>();
  /** The rate limits of the options are declared (once, before the first batch). */
  #prepared = false;

  constructor(options: LaneDispatcherOptions) {
    if (!options || !isSqlExecutor(options.executor))
      throw new OutboxValidationError(
        'executor',
        'must be a SqlExecutor on a pool: createLaneDispatcher({ executor: fromPg(pool), ... })',
      );
    if (!options.publisher || typeof options.publisher.publish !== 'function')
      throw new OutboxValidationError('publisher', 'must have a publish(messages) method');
    this.#options = resolveDispatcherOptions({
      executor: options.executor,
      publisher: options.publisher,
      schema: options.schema,
      batchSize: options.batchSize ?? 500,
      leaseMs: options.leaseMs,
      pollIntervalMs: options.pollIntervalMs ?? 200,
      maxAttempts: options.maxAttempts,
      backoff: options.backoff,
      deadLetterPolicy: options.deadLetterPolicy,
      routePause: options.routePause,
      rateLimits: options.rateLimits,
    });
    const maxLanes = options.maxLanes ?? LANE_COUNT;
    if (!Number.isInteger(maxLanes) || maxLanes < 1)
      throw new OutboxValidationError(
        'maxLanes',
        `must be a positive integer, got ${String(maxLanes)}`,
      );
    this.#maxLanes = maxLanes;
    if (options.asyncCommit !== undefined && typeof options.asyncCommit !== 'boolean')
      throw new OutboxValidationError(
        'asyncCommit',
        `must be true or false, got ${JSON.stringify(options.asyncCommit)}`,
      );
    this.#asyncCommit = options.asyncCommit ?? false;
    this.#stopDrain = options.stopDrain ?? (() => false);
    this.#executor = options.executor;
    this.#publisher = options.publisher;
    this.#schema = quoteIdentifier(this.#options.schema);
    this.id = options.id ?? defaultOwnerId();
    this.#wakeUps = new WakeUps(options.wakeSource, this.#events, (hint) =>
      this.#publishHinted(hint),
    );
    // Read-only spells of the database, told once each (events.ts), as the claim engine does.
    watchReadOnly(this.#events);
    this.#routes = new RouteGate({
      executor: options.executor,
      options: this.#options,
      publisher: options.publisher,
      events: this.#events,
      wake: () => this.#wakeUps.wake(),
    });
    this.#writers = new PreArmWriters(async (armedAt) => {
      const { rows } = await this.#executor.query<PreArmProbe>(lanePreArmWritersSql, [armedAt]);
      return rows[0];
    });
    const s = this.#schema;
    this.#sql = {
      next: laneNextCallSql(s),
      balance: `SELECT lane, cursor::text AS cursor FROM ${s}.outbox_lane_balance($1, $2, $3)`,
      due: laneDueSql(s),
      nextParkedDue: laneNextParkedDueSql(s),
      settleParked: `SELECT ${s}.outbox_lane_settle_parked($1, $2, $3, $4, $5, $6, $7)`,
      leave: laneLeaveSql(s),
      // Prepared where the executor prepares (sql/lanes.ts says why; #publishNamed falls back).
      byIds: preparable(laneByIdsSql(s)),
      expire: laneExpireSql(s),
      claimsWaiting: claimEnginePendingAggregatesSql(s),
    };
  }

  get state(): DispatcherState {
    return this.#state;
  }

  on: Dispatcher['on'] = (event, listener) => this.#events.on(event, listener);

  stats(): DispatcherStats {
    return { ...this.#stats };
  }

  start(): void {
    if (this.#state !== 'created')
      throw new Error(`dispatcher is ${this.#state}; create a new one to start again`);
    this.#state = 'running';
    this.#events.emit('dispatcher:start', { owner: this.id });
    this.#wakeUps.start();
    this.#worker = this.#run();
  }

  async stop(): Promise<void> {
    if (this.#state === 'stopped') return;
    if (this.#state === 'created') {
      this.#state = 'stopped';
      return;
    }
    if (this.#state === 'running') this.#state = 'stopping';
    clearTimeout(this.#catchUp);
    this.#wakeUps.wake();
    await this.#worker;
    await this.#wakeUps.stop();
    if ((this.#state as DispatcherState) !== 'stopped') {
      this.#state = 'stopped';
      this.#events.emit('dispatcher:stop', { owner: this.id });
    }
  }

  wake(): void {
    this.#wakeUps.wake();
  }

  onIdle(): Promise<void> {
    return this.#idle.whenIdle();
  }

  async drain(): Promise<DrainResult> {
    if (this.#state !== 'created')
      throw new Error(`drain() runs on a dispatcher that was not started (state: ${this.#state})`);
    const before = this.stats();
    let failed = false;
    const off = this.on('dispatcher:publish:outcome', ({ outcome }) => {
      if (outcome.status !== 'published') failed = true;
    });
    try {
      this.#balanceAt = 0;
      this.#heldSince = this.#heldWaitMs = 0;
      while (!this.#stopDrain() && (await this.#cycle(true))) {
        /* batches until one finds nothing */
      }
    } catch (error) {
      // As #run after a failure: the next drain starts from the cursors as committed.
      await this.#forget();
      throw error;
    } finally {
      off();
      await this.#leave();
    }
    return { ...statsSince(before, this.stats()), failed };
  }

  async #run(): Promise<void> {
    let failures = 0;
    while (this.#state === 'running') {
      let busy: boolean;
      try {
        busy = await this.#cycle(false);
        failures = 0;
      } catch (error) {
        failures++;
        const retryInMs = Math.min(
          30_000,
          this.#options.pollIntervalMs * 2 ** Math.min(failures, 8),
        );
        this.#stats.claimFailures++;
        if (isFenced(error)) this.#stats.fenced++;
        this.#events.emit('dispatcher:claim:failure', {
          error: error instanceof Error ? error : new Error(String(error)),
          retryInMs,
        });
        await this.#forget();
        await this.#wakeUps.sleep(retryInMs);
        continue;
      }
      // An idle dispatcher arms the wake source (producers NOTIFY while a waiter row lives) and
      // looks once more before it sleeps: what committed before arming is found by that look.
      // Armed until a batch comes back full, not only while idle: while armed every writer's
      // NOTIFY names what it wrote, and those go out by id before the next read (#publishNamed)
      // instead of waiting for it. A backlog disarms (writers stop notifying: no cost at load).
      if (await this.#wakeUps.afterClaim(this.#saturated ? 1 : 0)) continue;
      // Every writer notifies now: a read that found messages (not a full batch) left nothing
      // committed behind it, and what commits next is named by its NOTIFY. Looking again at once
      // (as after a busy read) is a read for every message at a steady rate, with the wake-ups
      // waiting behind it; so the loop sleeps, and cursors left to write go with the deferred
      // read (HINTED_CATCH_UP_MS).
      const quiet = this.#quiet();
      if (busy && !quiet) this.#inFlightWaitMs = 0;
      // Cursors left to write on going idle are written by the next read (#cycle): no sleep first.
      if ((!busy || quiet) && this.#state === 'running' && (quiet || !this.#pending())) {
        if (this.#pending()) this.#deferCatchUp();
        // A message parked for a rate-limit token comes due with no write to announce it.
        const wait = await this.#idleWaitMs();
        this.#sleeping = true;
        // Named while it was busy and quiet (#publishHinted): published as a wake-up asleep is.
        if (this.#named.length > 0) this.#startPublishAsleep();
        try {
          // And no later than the next balance, which renews this dispatcher's leases and takes
          // the lanes whose owner stopped renewing (killed): with a long poll interval, an idle
          // dispatcher left them for that long (a minute's poll: a minute).
          // With rate limits, no later than the parked path's next look (at most a second after
          // the last): messages parked for a token by another dispatcher, whose lanes this one
          // took over, come due with nothing to tell this one when (its own deferrals are in
          // nextTokenInMs). Three `outbox dispatch --engine lanes` processes stalled for the
          // poll interval (5 s) after lanes changed hands (bench details.rateLimitWindows.lanes).
          await this.#wakeUps.sleep(
            Math.min(
              wait,
              this.#routes.nextTokenInMs() ?? wait,
              Math.max(1, this.#balanceAt - Date.now()),
              this.#options.rateLimits.length > 0 ? Math.max(1, this.#parkedAt - Date.now()) : wait,
              // When the database last said the first parked head of its lanes comes due.
              Math.max(1, this.#parkedKnownDue - Date.now()),
            ),
          );
        } finally {
          this.#sleeping = false;
        }
      }
    }
    // Stopping with messages published by id above their lanes' positions (their lane read was
    // deferred: HINTED_CATCH_UP_MS): that read now, so that the cursors given back pass them and
    // the next owner does not publish them again.
    await this.#hintedSettled();
    if ([...this.#handled.values()].some((ids) => ids.size > 0))
      await this.#cycle(false).catch(() => undefined);
    await this.#leave();
  }

  /**
   * How long an idle dispatcher sleeps (a wake-up cuts it short). A writer decides whether to
   * NOTIFY when it INSERTs (sql/lanes.ts: while a waiter row lives), not when it commits: a
   * transaction that wrote while this dispatcher was busy (disarmed) and commits after it armed
   * and looked once more sends no NOTIFY, and its messages waited for the poll interval (60 s in
   * the test that shows it). The horizon tells when such a transaction may exist: an id taken
   * that is not final yet. Then the dispatcher looks again after 1 ms, 2, 4… up to the poll
   * interval, until the horizon is settled (a long write transaction elsewhere costs a few reads).
   * Only while such a writer may be left ({@link #preArmClear}): afterwards every writer notifies,
   * and the looks only stood in the way of the wake-ups (issue 43: at 1,000 messages a second the
   * horizon is never settled, and those looks were most of the lane reads).
   */
  async #idleWaitMs(): Promise<number> {
    // Idle with nothing in flight: learn it once an arming, while it is cheap to (no writer
    // between BEGIN and COMMIT, as a rule). Asked only once writes were in flight, the first
    // probe met their transactions, begun before it, and the short looks went on until those
    // ended: seven to nine lane reads at the start of a steady rate.
    if (
      this.#wakeUps.hasSource &&
      !this.#maybeInFlight &&
      !this.#writers.knows(this.#wakeUps.generation)
    )
      await this.#preArmClear();
    if (!this.#wakeUps.hasSource || !this.#maybeInFlight || (await this.#preArmClear())) {
      this.#inFlightWaitMs = 0;
      return this.#options.pollIntervalMs;
    }
    this.#inFlightWaitMs = Math.min(
      this.#options.pollIntervalMs,
      Math.max(1, this.#inFlightWaitMs * 2),
    );
    return this.#inFlightWaitMs;
  }

  /**
   * True when no transaction that may have written lane messages without a NOTIFY (its snapshot
   * older than the wake source's arming) is left uncommitted, and a lane read begun after that
   * was known has returned ({@link #writers}). Asks the database (one probe of its sessions) while
   * it is not known yet; false whenever in doubt: the source is not armed, the probe failed.
   */
  async #preArmClear(): Promise<boolean> {
    const wake = this.#wakeUps;
    return wake.armed && (await this.#writers.check(wake.generation));
  }

  /**
   * After a failed call: what it carried is lost with it, so lanes are taken again from the
   * cursors as committed (a published message whose cursor move was lost is published again).
   */
  async #forget(): Promise<void> {
    await this.#discardAhead();
    this.#outcome = emptyOutcome();
    this.#unpublished.clear();
    this.#handled.clear();
    this.#lastPublished.clear();
    this.#named = [];
    this.#positions.clear();
    // The horizon too: the next call may reach another server (a promoted replica, a restored
    // backup) whose id sequence is behind this safe id; kept, it lets the cursors pass ids that
    // server hands out again.
    this.#horizon = { safe: '0', pairId: '0', pairXid: '0' };
    this.#writers.forget();
    this.#balanceAt = 0;
  }

  /** Commits what is pending, then gives the lanes back (best effort: else their leases expire). */
  async #leave(): Promise<void> {
    try {
      await this.#hintedSettled();
      await this.#discardAhead();
      if (this.#pending()) await this.#next(0, true);
      await this.#executor.query(this.#sql.leave, [this.id]);
    } catch (error) {
      this.#events.emit('dispatcher:settle:failure', {
        owner: this.id,
        error: error instanceof Error ? error : new Error(String(error)),
        messages: this.#outcome.parkIds.length,
      });
    }
    this.#cursors.clear();
    this.#positions.clear();
    this.#balanceAt = 0;
  }

  /**
   * Waits for a batch read ahead and forgets it (stopping, or after a failure): its rows were
   * neither published nor counted, and the call moved no cursor past a published message.
   */
  async #discardAhead(): Promise<void> {
    const ahead = this.#ahead;
    this.#ahead = undefined;
    this.#aheadNow?.();
    if (ahead) await ahead.catch(() => undefined);
  }

  /** Something the database does not know yet: parked failures, or positions past cursors. */
  #pending(): boolean {
    if (this.#outcome.parkIds.length > 0 || this.#outcome.aheadIds.length > 0) return true;
    for (const [lane, position] of this.#positions)
      if (BigInt(position) > BigInt(this.#cursors.get(lane) ?? position)) return true;
    return false;
  }

  /** One batch (and the parked path when due). True when it did anything. */
  async #cycle(draining: boolean): Promise<boolean> {
    this.#idle.begin();
    // This is the lane read a hinted publish deferred, if one was.
    clearTimeout(this.#catchUp);
    this.#catchUp = undefined;
    try {
      await this.#hintedSettled();
      // Named by wake-ups while this dispatcher was busy: before the next read, which would find
      // them too but reads every lane (not with a batch read ahead: a backlog, no latency to win).
      if (!draining && !this.#ahead && this.#named.length > 0) await this.#publishNamed();
      if (!this.#prepared && this.#options.rateLimits.length > 0)
        await declareRateLimits(this.#executor, this.#options.rateLimits, {
          schema: this.#options.schema,
        });
      this.#prepared = true;
      // Not with a batch read ahead in flight: that batch is taken first, the balance next time.
      if (Date.now() >= this.#balanceAt && !this.#ahead) {
        await this.#balance();
        this.#parkedAt = 0; // lanes taken over may hold due parked messages
      }
      if (this.#cursors.size === 0) {
        this.#idle.noteClaim(true);
        return false;
      }
      const started = Date.now();
      const ahead = this.#ahead;
      this.#ahead = undefined;
      const safe = this.#horizon.safe;
      const batch = await (ahead ?? this.#next(this.#options.batchSize));
      // A batch read ahead may have moved the horizon before `safe` was taken: count it as moved.
      this.#maybeInFlight =
        ahead !== undefined || this.#horizon.pairXid !== '0' || this.#horizon.safe !== safe;
      const messages = batch.rows.filter(
        (r) => r.message_id !== null && !this.#handled.get(r.lane)?.has(r.id),
      );
      this.#events.emit('dispatcher:claim:success', {
        owner: this.id,
        count: messages.length,
        durationMs: Date.now() - started,
      });
      const saturated = messages.length >= this.#options.batchSize;
      this.#saturated = saturated;
      const now = Date.now();
      // Read the next batch while this one is published, on a backlog only, and not when the
      // balance or the parked path is due: those run with no batch in flight (a lane given back
      // has nothing unsettled; the parked path's reads and writes are not raced by a read).
      if (
        saturated &&
        this.#state !== 'stopping' &&
        now < this.#balanceAt &&
        now < this.#parkedAt
      ) {
        this.#ahead = this.#readAhead(this.#advanced(batch, new Map(this.#positions)));
        // Handled when the next cycle awaits it (or discards it); not an unhandled rejection.
        this.#ahead.catch(() => undefined);
      }
      const publishing = performance.now();
      const moved = await this.#publishBatch(batch, messages);
      if (saturated) this.#publishMs = [this.#publishMs[1], performance.now() - publishing];
      this.#aheadNow?.();
      // When what this batch parked is due (committed by the next call, so looked at after it).
      const parkedDue = draining ? Infinity : this.#parkedDue();
      let parked = 0;
      // A drain looks for parked heads when the lanes are not saturated (and at least every
      // second): a drain of a backlog does not pay a query a batch for a table that is empty. A
      // running dispatcher looks when something may be due there, not after every batch: at
      // 1,000 msg/s a batch is a few messages and the look (a query as long as the read) stood
      // between a commit and the read that finds it (issue 43: 0.64 of 2.6 ms mean).
      if (
        !this.#ahead &&
        (draining ? !saturated || Date.now() >= this.#parkedAt : Date.now() >= this.#parkedAt)
      ) {
        // The parks of published batches first: a run behind a due head must find every
        // message parked before it (a batch read ahead may have left some only in memory).
        if (this.#outcome.parkIds.length > 0) await this.#next(0);
        // The batch may have taken up to leaseMs / 2 and the parked path may take as long: renew
        // the leases first when due, or the cycle outlasts them (another dispatcher takes the
        // lanes, publishes the same parked runs again, and this one's settle is fenced).
        if (Date.now() >= this.#balanceAt) await this.#balance();
        if (Date.now() >= this.#expiryAt) await this.#expireApprovals();
        parked = await this.#publishParked();
        // Found some: look again next cycle (more may be due). Else when the first parked head
        // of the owned lanes is due (laneNextParkedDueSql: the lanes taken over hold messages
        // parked by another dispatcher), at the poll cadence (an idle dispatcher looks at every
        // poll, as before) and at least every second; what this dispatcher parks itself sets
        // the time it is due (#parkedDue).
        if (!draining && parked === 0) await this.#learnParkedDue();
        this.#parkedAt = draining
          ? Date.now() + 1_000
          : parked > 0
            ? 0
            : Math.min(
                Date.now() + Math.min(1_000, this.#options.pollIntervalMs),
                this.#parkedKnownDue,
              );
      }
      if (parkedDue < this.#parkedAt) this.#parkedAt = parkedDue;
      // A message this dispatcher parked for want of a rate-limit token is due at its token's
      // slot (destination-limits.ts places them a slot apart): the parked path is looked at then.
      // The idle loop already wakes for it (#run: nextTokenInMs), but only read its lanes, and
      // the parked path waited for its next look, up to a second: a token the bucket could not
      // keep (burst 1) was lost, one message a second went out at 10/s (lane-destination-limits
      // .test.ts). Three `outbox dispatch --engine lanes` processes at 50/s: 0.75 -> 0.80 of the
      // limit (bench details.rateLimitWindows.lanes; what still stops them: docs/lanes.md).
      const tokenInMs = draining ? undefined : this.#routes.nextTokenInMs();
      if (tokenInMs !== undefined)
        this.#parkedAt = Math.min(this.#parkedAt, Date.now() + tokenInMs);
      const busy = messages.length > 0 || moved || parked > 0;
      // Going idle: what is pending is written rather than left to the next sync, so status and
      // retention see the cursors where they are (a busy dispatcher writes them every second).
      // A drain writes it now. A running dispatcher has its next read carry it: going idle it
      // arms the wake source and reads once more (#run) at once, and that read writes the
      // cursors; a call of its own here stood between a commit and the read that finds it (issue
      // 43 latency). Not idle (onIdle) until then.
      // A drain that read again only what it had published (its lanes' positions held back by
      // the horizon: a write transaction of this database still running, a moment for another
      // dispatcher's call, for as long as a caller's) waits for the horizon rather than end with
      // the lanes unread past that batch (the bench's drains under concurrency 2 once ended
      // with half of their messages left; lane-dispatcher.test.ts). Up to
      // DRAIN_HORIZON_WAIT_MS a stall, waits doubling from 1 ms; then it ends, as before.
      if (draining && !busy && batch.rows.some((r) => r.message_id !== null)) {
        const now = Date.now();
        this.#heldSince ||= now;
        if (now - this.#heldSince < DRAIN_HORIZON_WAIT_MS) {
          this.#heldWaitMs = Math.min(100, Math.max(1, this.#heldWaitMs * 2));
          await new Promise((resolve) => setTimeout(resolve, this.#heldWaitMs));
          return true;
        }
      }
      if (busy) this.#heldSince = this.#heldWaitMs = 0;
      if (!busy && this.#pending()) {
        if (draining) {
          this.#idle.noteClaim(true);
          await this.#next(0, true);
          return draining;
        }
        this.#syncAt = 0;
        this.#idle.noteClaim(false);
        return false;
      }
      this.#idle.noteClaim(!busy);
      return busy;
    } finally {
      this.#idle.end();
    }
  }

  /**
   * When the first failure the last batch parked is due: the parked path is looked at then, so a
   * retry (or a deferral's end) is not later than when the path was looked at after every
   * batch. A dead letter may make its aggregate's next parked message due (`skip`): now.
   */
  #parkedDue(): number {
    const o = this.#outcome;
    const now = Date.now();
    let due = Infinity;
    o.parkKinds.forEach((kind, i) => {
      due = Math.min(due, kind === 'dead' ? now : now + (o.parkDelays[i] ?? 0));
    });
    return due;
  }

  /** {@link #parkedKnownDue} from the database (a failed read leaves it as it was). */
  async #learnParkedDue(): Promise<void> {
    const { rows } = await this.#executor.query<{ inMs: number | null }>(this.#sql.nextParkedDue, [
      this.id,
    ]);
    const inMs = rows[0]?.inMs;
    // Due already, though the look just found none due: as a rule it came due between the two
    // statements (at 50/s a slot is 20 ms): looked at again at once. Should the look keep
    // finding none (a row it cannot read), the waits double up to its own cadence: no spin.
    const overdue = inMs !== null && inMs !== undefined && inMs <= 0;
    this.#overdueWaitMs = overdue
      ? Math.min(Math.min(1_000, this.#options.pollIntervalMs), this.#overdueWaitMs * 2 || 1)
      : 0;
    this.#parkedKnownDue =
      inMs === null || inMs === undefined
        ? Infinity
        : Date.now() + (overdue ? this.#overdueWaitMs : inMs);
  }

  /** Takes this dispatcher's share of the lanes (with nothing pending: see sql/lanes.ts). */
  async #balance(): Promise<void> {
    if (this.#pending()) await this.#next(0, true);
    const renewing = Date.now();
    const { rows } = await this.#executor.query<{ lane: number; cursor: string }>(
      this.#sql.balance,
      [this.id, this.#options.leaseMs, this.#maxLanes],
    );
    this.#renewedAt = renewing;
    // What the database said of the lanes owned before: the next look (#cycle sets it due after
    // a balance) asks again. Kept, it outlived lanes given back: with none left no look runs,
    // and an idle loop bounded by a time gone by slept 1 ms at a time until the next balance.
    this.#parkedKnownDue = Infinity;
    this.#cursors = new Map(rows.map((r) => [r.lane, r.cursor]));
    this.#positions = new Map(this.#cursors);
    // A lane given back or taken over: what was remembered above its cursor no longer holds.
    for (const lane of this.#handled.keys())
      if (!this.#cursors.has(lane)) this.#handled.delete(lane);
    for (const key of this.#lastPublished.keys())
      if (!this.#cursors.has(Number(key.slice(0, key.indexOf(':')))))
        this.#lastPublished.delete(key);
    this.#balanceAt = Date.now() + this.#options.leaseMs / 3;
  }

  /**
   * `outbox_lane_next`: commits the parked failures and, when `sync` or every
   * {@link CURSOR_SYNC_MS}, the lanes' positions as their cursors; reads up to `batch` rows.
   */
  async #next(batch: number, sync = false): Promise<Batch> {
    return this.#send(this.#take(sync), batch);
  }

  /**
   * The next batch, read while the current one is published (`readAfter`: where the current one
   * leaves each lane). What the call commits is taken now, as a call sent now would take it; the
   * call itself is sent so as to end when the publish is expected to (the last two publishes'
   * shorter time less twice the last such read's, {@link AHEAD_MARGIN_MS} earlier), or when the
   * publish ends, whichever comes first. Sent at once, a batch published to a slow destination
   * (an HTTP endpoint: 200 ms for 500) was read before most of what committed during its
   * publish, and a tenant's share written then waited two batches instead of one (issue 43,
   * `lanes_fair_share_p95_ms`). A fast publisher (a drain to a broker) gets it at once, as before.
   */
  #readAhead(readAfter: Map<number, string>): Promise<Batch> {
    const taken = this.#take(false);
    const waitMs = Math.min(...this.#publishMs) - 2 * this.#aheadReadMs - AHEAD_MARGIN_MS;
    const due =
      waitMs <= 0
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, waitMs);
            this.#aheadNow = () => {
              clearTimeout(timer);
              resolve();
            };
          });
    return due.then(async () => {
      this.#aheadNow = undefined;
      const sent = performance.now();
      const read = await this.#send(taken, this.#options.batchSize, readAfter);
      this.#aheadReadMs = performance.now() - sent;
      return read;
    });
  }

  /**
   * What a call commits: the last batch's outcome, and when `sync` or every
   * {@link CURSOR_SYNC_MS} the lanes' positions as their cursors.
   */
  #take(sync: boolean): Outcome {
    // Taken now: a batch published while the call runs records its outcome for the next one.
    const o = this.#outcome;
    this.#outcome = emptyOutcome();
    if (sync || Date.now() >= this.#syncAt)
      for (const [lane, position] of this.#positions) {
        const cursor = this.#cursors.get(lane);
        if (cursor === undefined || BigInt(position) <= BigInt(cursor)) continue;
        o.lanes.push(lane);
        o.from.push(cursor);
        o.to.push(position);
      }
    return o;
  }

  /** Sends `outbox_lane_next` with what {@link #take} took; reads up to `batch` rows. */
  async #send(o: Outcome, batch: number, readAfter?: Map<number, string>): Promise<Batch> {
    const ahead = readAfter !== undefined;
    const reading = [...(readAfter ?? this.#positions)];
    const lookAt = batch > 0 ? this.#writers.readBegins() : undefined;
    const { rows } = await this.#executor.query<LaneRow>(this.#sql.next, [
      this.id,
      o.lanes,
      o.from,
      o.to,
      o.parkLanes,
      o.parkIds,
      o.parkKinds,
      o.parkErrors,
      o.parkDelays,
      this.#options.deadLetterPolicy === 'hold',
      batch,
      this.#start,
      this.#options.leaseMs,
      this.#horizon.safe,
      this.#horizon.pairId,
      this.#horizon.pairXid,
      this.#asyncCommit,
      reading.map(([lane]) => lane),
      reading.map(([, position]) => position),
      o.aheadLanes,
      o.aheadIds,
      reading.map(([lane]) => this.#tenantAfter.get(lane) ?? null),
    ]);
    o.lanes.forEach((lane, i) => this.#cursors.set(lane, o.to[i]!));
    if (o.lanes.length > 0) this.#syncAt = Date.now() + CURSOR_SYNC_MS;
    // A read of every owned lane: begun after a probe found no silent writer left, it clears.
    if (lookAt) this.#writers.readEnded(lookAt);
    const [first] = rows;
    if (first && first.lane === -1) {
      this.#horizon = {
        safe: first.id,
        pairId: first.sequence ?? '0',
        pairXid: (first.payload as string | null) ?? '0',
      };
      rows.shift();
    }
    const read = withShares(rows, new Map(reading), this.#tenantAfter);
    if (read.length > 0) this.#start = lastRegularLane(read) ?? this.#start;
    return { rows: read, safe: this.#horizon.safe, ahead };
  }

  /**
   * `positions` moved to where `batch` examined each lane (its marker, else its last row: the
   * batch filled on it), but not past the batch's horizon. The same map, returned.
   */
  #advanced(batch: Batch, positions: Map<number, string>): Map<number, string> {
    if (!batch.examined) {
      batch.examined = new Map<number, string>();
      for (const row of batch.rows) {
        if (row.share) continue; // ahead of the lane's read: it does not move the position
        const seen = batch.examined.get(row.lane);
        if (seen === undefined || above(row.id, seen)) batch.examined.set(row.lane, row.id);
      }
    }
    for (const [lane, upto] of batch.examined) {
      const from = positions.get(lane);
      if (from === undefined) continue;
      const to = above(upto, batch.safe) ? batch.safe : upto;
      if (above(to, from)) positions.set(lane, to);
    }
    return positions;
  }

  /**
   * Publishes a batch; what it did becomes the pending outcome for the next call. Each lane's
   * cursor moves as far as it was examined, but not past the horizon; what was handled above it
   * is remembered. True when a cursor moves.
   */
  async #publishBatch(batch: Batch, messages: readonly LaneRow[]): Promise<boolean> {
    // Read ahead, the batch may hold later messages of aggregates the last one did not publish
    // (their parks are not committed yet): those are parked behind, unsent, in order.
    const behind = (m: LaneRow) =>
      batch.ahead && m.ordered && this.#unpublished.has(`${m.lane}:${m.aggregate_id}`);
    // A tenant's share first: it was written while the batch's tenant held the lanes, and at the
    // end of a batch to a slow destination it waited for the whole batch. Order is kept:
    // publishInOrder sends each aggregate's messages by sequence whatever their place here.
    const sending = [
      ...messages.filter((m) => m.share),
      ...messages.filter((m) => !m.share),
    ].filter((m) => !behind(m));
    const plans = sending.length > 0 ? await this.#publishGated(sending, 0) : [];
    const unpublished = new Set<string>();
    const park = (m: LaneRow, settled: Settlement) => this.#park(m, settled, unpublished);
    const settledAll = plans.map((plan) => laneSettlement(plan, 'unsent'));
    settledAll.forEach((settled, i) => {
      if (settled.kind !== 'published') park(sending[i]!, settled);
    });
    // Published or parked ahead of its lane's cursor: the next call records it, and lane reads
    // skip it from then on (before, #handled does).
    for (const m of messages)
      if (m.share) {
        this.#outcome.aheadLanes.push(m.lane);
        this.#outcome.aheadIds.push(m.id);
      }
    if (messages.length < this.#options.batchSize) this.#remember(sending, settledAll);
    if (sending.length < messages.length) {
      // Parked in id order with the batch's failures (the call parks by lane and id).
      for (const m of messages) if (behind(m)) park(m, { kind: 'unsent' });
    }
    this.#unpublished = unpublished;
    const before = new Map(this.#positions);
    this.#advanced(batch, this.#positions);
    let moved = false;
    for (const [lane, position] of this.#positions) {
      if (position === before.get(lane)) continue;
      moved = true;
      const handled = this.#handled.get(lane);
      if (handled) for (const id of handled) if (!above(id, position)) handled.delete(id);
    }
    // What is above its lane's position (held back by the horizon) is read again: remembered,
    // so it is skipped then. What the position passed is never read again.
    for (const m of messages) {
      const position = this.#positions.get(m.lane);
      if (position !== undefined && !above(m.id, position)) continue;
      let handled = this.#handled.get(m.lane);
      if (!handled) this.#handled.set(m.lane, (handled = new Set()));
      handled.add(m.id);
    }
    if (messages.length > 0) {
      this.#stats.batches++;
      this.#stats.claimed += messages.length;
    }
    return moved;
  }

  /** {@link #lastPublished}: what `rows` became (`settled`, in the same order). */
  #remember(rows: readonly LaneRow[], settled: readonly Settlement[]): void {
    rows.forEach((m, i) => {
      if (!m.ordered) return;
      const key = `${m.lane}:${m.aggregate_id}`;
      if (settled[i]?.kind === 'published') this.#lastPublished.set(key, Number(m.sequence));
      else this.#lastPublished.delete(key);
    });
    if (this.#lastPublished.size > LAST_PUBLISHED_MAX) this.#lastPublished.clear();
  }

  /**
   * Records that `m` was not published: the next call parks it (`settled` says how), and an
   * ordered one that holds its aggregate back goes into `unpublished` (`lane:aggregate`).
   */
  #park(m: LaneRow, settled: Settlement, unpublished?: Set<string>): void {
    const o = this.#outcome;
    // A dead letter under 'skip' does not hold its aggregate back (sql/lanes.ts: blocks).
    const holds = settled.kind !== 'dead' || this.#options.deadLetterPolicy === 'hold';
    if (m.ordered && holds) unpublished?.add(`${m.lane}:${m.aggregate_id}`);
    this.#lastPublished.delete(`${m.lane}:${m.aggregate_id}`);
    o.parkLanes.push(m.lane);
    o.parkIds.push(m.id);
    o.parkKinds.push(settled.kind);
    o.parkErrors.push(settled.error ?? null);
    o.parkDelays.push(settled.delayMs ?? null);
  }

  /**
   * A wake-up's hint: the messages the writer's NOTIFY named (`lane:id,...`, sql/lanes.ts), each
   * one nothing can come before (unordered, or the first of its aggregate). While the loop sleeps
   * idle, those of lanes this dispatcher owns are read by primary key and published at once,
   * without reading the lanes (issue 43: that read was most of the latency). Safe because the
   * loop sleeps: no read or batch is in flight, and the loop's next read waits for this (G3: a
   * message is in one publish at a time); what was published is remembered as handled above its
   * lane's position (the lane read skips it, as a row read again below the horizon); what failed
   * is parked by that read's call, before it reads (G4: its aggregate's later messages park
   * behind it, as behind a batch's failure). Best effort: anything else waits for that read.
   */
  #publishHinted(hint: string): boolean {
    if (this.#state !== 'running') return false;
    for (const item of hint.split(',')) {
      if (this.#named.length >= NAMED_MAX) break;
      const [lane, id] = item.split(':');
      if (id && /^\d+$/.test(id)) this.#named.push({ lane: Number(lane), id });
    }
    // Busy: the loop, woken, publishes them before its next read (#cycle) — unless it is quiet
    // (every writer names what it writes, no backlog): then waking it is a lane read for what
    // the hint names, and at a steady rate NOTIFYs land during reads, so nearly a read per
    // message (issue 43). Left for its sleep, which publishes them first (#run). Asleep: now, and
    // the loop sleeps on unless a lane read is wanted (#publishAsleep).
    if (!this.#sleeping) return this.#quiet();
    this.#startPublishAsleep();
    return true;
  }

  /**
   * Runs {@link #publishAsleep} beside those running, up to {@link HINTED_CONCURRENCY}; at the
   * limit, the first of them to finish its read and publish takes what was named since.
   */
  #startPublishAsleep(): void {
    if (this.#hinted.size >= HINTED_CONCURRENCY) return;
    const hinted: Promise<void> = this.#publishAsleep().finally(() => this.#hinted.delete(hinted));
    this.#hinted.add(hinted);
  }

  /** Until no publish of what wake-ups named is in flight (none starts while the loop is awake). */
  async #hintedSettled(): Promise<void> {
    while (this.#hinted.size > 0) await Promise.all(this.#hinted);
  }

  /**
   * While the loop sleeps: publishes what wake-ups named (as it keeps coming), then wakes the
   * loop if a lane read is wanted now — a named message of an owned lane not published by id
   * (not eligible, not found, failed: parked, to be committed) — and otherwise has it read its
   * lanes {@link HINTED_CATCH_UP_MS} later.
   */
  async #publishAsleep(): Promise<void> {
    let read = false;
    while (this.#named.length > 0 && this.#sleeping && this.#state === 'running')
      if (await this.#publishNamed()) read = true;
    if (read || this.#named.length > 0 || (this.#pending() && !this.#quiet())) this.#wakeUps.wake();
    else this.#deferCatchUp();
  }

  /** The lane read after messages went out by id, {@link HINTED_CATCH_UP_MS} from the first. */
  #deferCatchUp(): void {
    if (this.#catchUp) return;
    this.#catchUp = setTimeout(() => this.#wakeUps.wake(), HINTED_CATCH_UP_MS);
    this.#catchUp.unref();
  }

  /**
   * Every writer now names what it writes (the wake source armed, and no writer of before the
   * arming left: {@link #writers}), no backlog (the last batch was not full) and no parked
   * message due: nothing is found sooner by reading again than by the wake-ups.
   */
  #quiet(): boolean {
    return (
      !this.#saturated &&
      this.#wakeUps.armed &&
      this.#writers.clear(this.#wakeUps.generation) &&
      Date.now() < this.#parkedAt
    );
  }

  /**
   * Publishes the messages wake-ups named ({@link #publishHinted}) that are still to publish: of
   * a lane this dispatcher owns, above its position and not handled (a lane read since may have
   * published them), read by primary key, then those nothing can come before. Runs while no lane
   * read does: while the loop sleeps (beside other calls of its own, {@link HINTED_CONCURRENCY}),
   * or at the start of a cycle with no batch read ahead. Never
   * rejects: what it could not do, the lane read does; true when there is such a thing (a named
   * message of an owned lane it did not publish, or one it parked).
   */
  async #publishNamed(): Promise<boolean> {
    const named = this.#named;
    this.#named = [];
    const lanes: number[] = [];
    const ids: string[] = [];
    for (const { lane, id } of named) {
      // Not one a lane read already handled: published (or parked) at or below the lane's
      // position, or remembered above it. A NOTIFY can come after the read that found its row.
      const position = this.#positions.get(lane);
      if (position === undefined || !above(id, position) || this.#handled.get(lane)?.has(id))
        continue;
      lanes.push(lane);
      ids.push(id);
    }
    if (lanes.length === 0) return false;
    try {
      const rows = await this.#readNamed(lanes, ids);
      if (rows.length < ids.length) {
        // Named by the WAL (CDC wake-ups) before it was visible: PostgreSQL flushes a commit's
        // record, which the decoder may stream at once, before the committing session leaves
        // the running transactions. Read what was missed again, once, a round trip later (by
        // then it almost always is), rather than a lane read and the horizon's short waits for
        // each such message (1 % of them in `latency_ms.cdc`; 0.05 % with NOTIFY, which is
        // sent after the commit is visible).
        const found = new Set(rows.map((r) => `${r.lane}:${r.id}`));
        const missed = ids.flatMap((id, i) => (found.has(`${lanes[i]}:${id}`) ? [] : [i]));
        const again = await this.#readNamed(
          missed.map((i) => lanes[i]!),
          missed.map((i) => ids[i]!),
        );
        if (again.length > 0) {
          rows.push(...again);
          rows.sort((a, b) => a.lane - b.lane || (above(a.id, b.id) ? 1 : -1));
        }
      }
      // Nothing can come before it: unordered, the first of its aggregate, or the one after
      // the last this dispatcher published of it.
      const messages = rows.filter(
        (m) =>
          !this.#handled.get(m.lane)?.has(m.id) &&
          (!m.ordered ||
            m.sequence === '1' ||
            this.#lastPublished.get(`${m.lane}:${m.aggregate_id}`) === Number(m.sequence) - 1),
      );
      if (messages.length === 0) return true;
      for (const m of messages) {
        let handled = this.#handled.get(m.lane);
        if (!handled) this.#handled.set(m.lane, (handled = new Set()));
        handled.add(m.id);
      }
      let plans: Plan[];
      try {
        plans = await this.#publishGated(messages, 0);
      } catch (error) {
        // Not settled: the lane read must find them again (published again, same id, G2).
        for (const m of messages) this.#handled.get(m.lane)?.delete(m.id);
        throw error;
      }
      const settled = plans.map((plan) => laneSettlement(plan, 'unsent'));
      settled.forEach((s, i) => {
        if (s.kind !== 'published') this.#park(messages[i]!, s);
      });
      this.#remember(messages, settled);
      this.#stats.batches++;
      this.#stats.claimed += messages.length;
      // A lane read is wanted for any of them not published by id here.
      return messages.length < lanes.length || settled.some((s) => s.kind !== 'published');
    } catch (error) {
      // A transaction pooler that does not carry prepared statements between server
      // connections: the read by id runs unprepared from now on (this one's lane read follows).
      if (error instanceof OutboxPoolerError)
        this.#sql.byIds = laneByIdsUnpreparedSql(this.#schema);
      this.#events.emit('dispatcher:claim:failure', {
        error: error instanceof Error ? error : new Error(String(error)),
        retryInMs: 0,
      });
      return true;
    }
  }

  /** Rows named by lane and id, by primary key (a sixth of the lease left at least, as #publish). */
  async #readNamed(lanes: number[], ids: string[]): Promise<LaneRow[]> {
    const { rows } = await this.#executor.query<LaneRow>(this.#sql.byIds, [
      lanes,
      ids,
      this.id,
      Math.ceil(this.#options.leaseMs / 6),
    ]);
    return rows;
  }

  /**
   * The expiry sweep of held messages (migration 027, sql/lane-approvals.ts), as the claim
   * engine's dispatchers run it: at most every {@link APPROVAL_SWEEP_MS}, again at the next look
   * when a sweep was full, with this dispatcher's dead-letter policy. Before the parked path, so
   * that what an expiry lets go (`skip`) is published in the same look. One probe of
   * `outbox_lane_approvals_awaiting_idx` when nothing is overdue.
   */
  async #expireApprovals(): Promise<void> {
    const { rows } = await this.#executor.query(this.#sql.expire, [
      APPROVAL_SWEEP_BATCH,
      this.#options.deadLetterPolicy === 'hold',
    ]);
    this.#expiryAt = rows.length >= APPROVAL_SWEEP_BATCH ? 0 : Date.now() + APPROVAL_SWEEP_MS;
  }

  /** Due heads of parked messages: published, then settled at once (rare: failures only). */
  async #publishParked(): Promise<number> {
    const { rows } = await this.#executor.query<LaneRow>(this.#sql.due, [
      this.id,
      this.#options.batchSize,
    ]);
    if (rows.length === 0) return 0;
    const settled = (await this.#publishGated(rows)).map((plan) => laneSettlement(plan, 'defer'));
    this.#remember(rows, settled);
    // A parked row above its lane's cursor (the cursor waits for the horizon) is read again by
    // the cursor once it leaves the parked table: remembered, so it is not published twice.
    rows.forEach((row) => {
      const position = this.#positions.get(row.lane);
      if (position === undefined || BigInt(row.id) <= BigInt(position)) return;
      let handled = this.#handled.get(row.lane);
      if (!handled) this.#handled.set(row.lane, (handled = new Set()));
      handled.add(row.id);
    });
    await this.#executor.query(this.#sql.settleParked, [
      this.id,
      rows.map((r) => r.lane),
      rows.map((r) => r.id),
      settled.map((s) => s.kind),
      settled.map((s) => s.error ?? null),
      settled.map((s) => s.delayMs ?? null),
      this.#options.deadLetterPolicy === 'hold',
    ]);
    return rows.length;
  }

  async #publish(
    messages: OutgoingMessage[],
    trace: BatchTrace | undefined,
  ): Promise<MessageFate[]> {
    return publishInOrder(this.#publisher, messages, {
      maxAttempts: this.#options.maxAttempts,
      trace,
      // Half a lease, and never past what is left of the leases (renewed at the last balance;
      // a sixth of a lease kept for the settle): a cycle's publish calls must not outlast them.
      deadline: Math.min(
        Date.now() + this.#options.leaseMs / 2,
        this.#renewedAt + (this.#options.leaseMs * 5) / 6,
      ),
      timeoutError: `publish did not finish within ${this.#options.leaseMs / 2} ms (half the lane lease)`,
      onOutcomes: (sent, outcomes, durationMs) =>
        sent.forEach((message, i) =>
          this.#events.emit('dispatcher:publish:outcome', {
            message,
            outcome: outcomes[i]!,
            durationMs,
          }),
        ),
    });
  }

  /**
   * Publishes `rows` as far as the route gate lets them (a paused or probing route, a rate limit
   * without a token: held, uncharged, G9), and returns each row's plan, in the order of `rows`,
   * counted in the stats. After the publish the gate pauses a route found down and turns its
   * failures into deferrals (destination-limits.ts). `attempts`: the failures so far of fresh
   * rows (0); parked ones carry theirs. The message a publisher gets counts this attempt too
   * (`OutgoingMessage.attempts`, as on the claim engine, whose claim counts it).
   */
  async #publishGated(rows: readonly LaneRow[], attempts?: number): Promise<Plan[]> {
    const started = Date.now();
    const outgoing = rows.map((r) => toOutgoing(r, (attempts ?? r.attempts ?? 0) + 1));
    // The claim engine's tracing (dispatch-spans.ts): a `dispatch batch` span linked to the
    // messages' traces, a `send` span per message in its producer's trace. Undefined without an
    // OpenTelemetry SDK: then no span work at all. The lanes engine has no settle of its own to
    // run in the batch span (the outcome goes with the next call), so it ends with the plans.
    const batch = startBatchTrace(this.id, this.id, outgoing, started);
    const behind = await this.#behindClaimEngine(outgoing);
    const gated = await this.#routes.gate(
      this.id,
      behind.size > 0 ? outgoing.filter((m) => !behind.has(m.rowId)) : outgoing,
    );
    const fates = gated.send.length > 0 ? await this.#publish(gated.send, batch) : [];
    const plans = gated.send.map((m, i) => this.#planOf(m, fates[i]!));
    await this.#routes.review(this.id, gated.send, fates, plans, gated);
    this.#routes.deferred(gated);
    const byRow = new Map<string, Plan>(plans.map((plan) => [plan.rowId, plan]));
    for (const rowId of behind)
      byRow.set(rowId, {
        rowId,
        kind: 'defer',
        delayMs: CLAIMS_CHECK_MS,
        reason:
          "waits for the claim engine's earlier messages of its aggregate (docs/lanes.md, Moving from the claim engine)",
      });
    const all = outgoing.map((message) => {
      const plan = byRow.get(message.rowId) ?? { rowId: message.rowId, kind: 'release' as const };
      this.#count(plan, message);
      return plan;
    });
    batch?.end(all);
    return all;
  }

  /**
   * The ordered messages of `outgoing` that a claim-engine message of the same aggregate, not
   * published yet (not a dead letter), comes before by sequence: published now, they would
   * overtake it, and a consumer checking order would take it as stale (docs/lanes.md, "Moving
   * from the claim engine"; the two engines share the sequence counters). Deferred without an
   * attempt (parked: an ordered one holds its aggregate) and looked at again after
   * {@link CLAIMS_CHECK_MS}. What waits on the claim engine is read once every
   * {@link CLAIMS_CHECK_MS} (one statement, at most {@link CLAIMS_CAP} rows) and kept: a batch
   * looks it up in memory. Above the cap every ordered message waits.
   */
  async #behindClaimEngine(outgoing: readonly OutgoingMessage[]): Promise<Set<string>> {
    const behind = new Set<string>();
    const now = Date.now();
    if (now >= this.#claimsCheckAt) {
      const { rows } = await this.#executor.query<{
        aggregateId: string;
        first: string;
        rows: number;
      }>(this.#sql.claimsWaiting, [CLAIMS_CAP + 1]);
      this.#claimsFirst =
        Number(rows[0]?.rows ?? 0) > CLAIMS_CAP
          ? 'all'
          : new Map(rows.map((r) => [r.aggregateId, Number(r.first)]));
      this.#claimsCheckAt = now + CLAIMS_CHECK_MS;
    }
    const first = this.#claimsFirst;
    if (first !== 'all' && first.size === 0) return behind;
    for (const m of outgoing) {
      if (m.ordered === false) continue;
      const claims = first === 'all' ? 0 : first.get(m.aggregateId);
      if (claims !== undefined && claims < m.sequence) behind.add(m.rowId);
    }
    return behind;
  }

  /** What a message's fate means for its row (as the claim engine plans a settle). */
  #planOf(message: OutgoingMessage, fate: MessageFate): Plan {
    const rowId = message.rowId;
    if (fate.kind === 'shadow') return { rowId, kind: 'shadow' };
    if (fate.kind === 'unsent') return { rowId, kind: 'release' };
    if (fate.kind === 'exhausted')
      return { rowId, kind: 'dead', error: `gave up after ${message.attempts - 1} attempts` };
    if (fate.outcome.status === 'published') return { rowId, kind: 'published' };
    const attempts = message.attempts;
    const error = fate.outcome.error;
    if (fate.outcome.status === 'retryable' && attempts < this.#options.maxAttempts)
      return {
        rowId,
        kind: 'retry',
        error,
        delayMs: fate.outcome.retryAfterMs ?? backoffDelayMs(attempts, this.#options.backoff),
      };
    return { rowId, kind: 'dead', error };
  }

  /** A plan in the stats (and a dead letter's event). */
  #count(plan: Plan, message: OutgoingMessage): void {
    const stats = this.#stats;
    if (plan.kind === 'published') stats.published++;
    else if (plan.kind === 'shadow') stats.shadowed++;
    else if (plan.kind === 'release') stats.released++;
    else if (plan.kind === 'defer') stats.postponed++;
    else if (plan.kind === 'retry') stats.retried++;
    else {
      stats.deadLettered++;
      this.#events.emit('dispatcher:dead-letter', { message, error: plan.error });
    }
  }
}

/**
 * A plan as the lane functions take it. A deferral read from a lane parks as 'unsent' with its
 * delay (`outbox_lane_next`: no attempt); one of the parked path is settled as 'defer'.
 */
function laneSettlement(plan: Plan, deferAs: 'unsent' | 'defer'): Settlement {
  switch (plan.kind) {
    case 'published':
    case 'shadow':
      return { kind: 'published' };
    case 'release':
      return { kind: 'unsent' };
    case 'defer':
      return { kind: deferAs, error: plan.reason, delayMs: plan.delayMs };
    case 'retry':
      return { kind: 'retry', error: plan.error, delayMs: plan.delayMs };
    case 'dead':
      return { kind: 'dead', error: plan.error };
  }
}

/**
 * Whether id `a` is above id `b`, both bigints as text (non-negative, no leading zeros, as
 * Postgres prints them): by length, then by digits. No BigInt a row, twice a batch.
 */
function above(a: string, b: string): boolean {
  return a.length !== b.length ? a.length > b.length : a > b;
}

function toOutgoing(row: LaneRow, attempts: number): OutgoingMessage {
  return {
    id: row.message_id!,
    rowId: `${row.lane}:${row.id}`,
    topic: row.topic,
    aggregateId: row.aggregate_id,
    sequence: Number(row.sequence),
    ordered: row.ordered,
    payload: row.payload,
    headers: row.headers ?? {},
    createdAt: new Date(row.created_ms),
    attempts,
    ...(row.shadow ? { shadow: true } : {}),
  };
}

/**
 * Creates a dispatcher of the lanes engine (migration 024): for messages written with
 * `createOutbox({ engine: 'lanes' })`.
 *
 * @example
 * ```ts
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * const dispatcher = createLaneDispatcher({ executor: fromPg(pool), publisher });
 * dispatcher.start();
 * process.on('SIGTERM', () => dispatcher.stop().then(() => pool.end()));
 * ```
 */
export function createLaneDispatcher(options: LaneDispatcherOptions): Dispatcher {
  const concurrency = options?.concurrency ?? 1;
  const maxLanes = options?.maxLanes ?? LANE_COUNT;
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > maxLanes)
    throw new OutboxValidationError(
      'concurrency',
      `must be an integer from 1 to maxLanes (${String(maxLanes)}), got ${String(concurrency)}`,
    );
  if (concurrency === 1) return new LaneDispatcher(options);
  const id = options.id ?? defaultOwnerId();
  const wakeSources = options.wakeSource
    ? shareWakeSource(options.wakeSource, concurrency)
    : undefined;
  const members = Array.from(
    { length: concurrency },
    (_, n) =>
      new LaneDispatcher({
        ...options,
        id: `${id}/${n}`,
        maxLanes: Math.ceil(maxLanes / concurrency),
        wakeSource: wakeSources?.[n],
      }),
  );
  return new LaneDispatcherGroup(id, members);
}

/** `<host>:<pid>:<random>`: what identifies a dispatcher as the owner of its lanes. */
const defaultOwnerId = () => `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
