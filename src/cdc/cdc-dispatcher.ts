import { OutboxValidationError } from '../core/errors.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import {
  createDispatcher,
  type Dispatcher,
  type DispatcherStats,
} from '../dispatcher/dispatcher.js';
import { TypedEmitter } from '../dispatcher/events.js';
import { DEFAULT_STATEMENT_TIMEOUT_MS, settleCommit } from '../dispatcher/options.js';
import type { QueryOptions } from '../store/sql-executor.js';
import {
  DEFAULT_RECONNECT_DELAY,
  reconnectDelayMs,
  type ReconnectDelayOptions,
} from '../dispatcher/wake/reconnect-delay.js';
import { candidateStatesSql, nextDueSql } from '../sql/cdc.js';
import { CandidateStore } from './candidate-store.js';
import { classifyCandidates, type CandidateState } from './classify.js';
import { ConfirmTracker } from './confirm-tracker.js';
import type { CdcEventMap } from './events.js';
import { isConnectionLoss, isSlotMissing, toError, type CdcDispatcherOptions } from './options.js';
import { formatLsn, type Lsn } from './lsn.js';
import {
  currentDatabase,
  defaultPublicationName,
  defaultSlotName,
  ensurePublication,
  ensureSlot,
  readSlotLag,
} from './slot.js';
import { openWalStream, type WalStream } from './wal-stream.js';

/**
 * - `created` → `start()` → `running` (stream open, or reopening after a loss) → `stop()` →
 *   `stopping` → `stopped`.
 */
export type CdcDispatcherState = 'created' | 'running' | 'stopping' | 'stopped';

/** A dispatcher driven by logical replication. Create with {@link createCdcDispatcher}. */
export interface CdcDispatcher {
  readonly state: CdcDispatcherState;
  readonly slotName: string | undefined;
  /** Highest position confirmed (or confirmable) so far, as Postgres prints it. */
  readonly confirmedLsn: string;
  /** Creates publication and slot if missing, starts the sweeper, opens the stream. */
  start(): Promise<void>;
  /** Stops streaming and sweeping; in-flight batches finish and settle. Idempotent. */
  stop(): Promise<void>;
  /** WAL bytes retained for the slot, or null without a slot. */
  slotLagBytes(): Promise<number | null>;
  /** Published/retried/... counts of the WAL-driven worker and of the sweeper. */
  stats(): { cdc: DispatcherStats; sweeper: DispatcherStats };
  /** The two counts summed: what a metrics hook expecting one dispatcher's stats wants. */
  totals(): DispatcherStats;
  on<K extends keyof CdcEventMap & string>(
    event: K,
    listener: (...args: CdcEventMap[K]) => void,
  ): () => void;
}

/** Under continuous load, candidate states are read (and positions confirmed) this often. */
const CLASSIFY_EVERY_MS = 100;
/**
 * Candidates whose state one query reads (see #classify): the oldest ones, which are what holds
 * the confirmed position back. A primary-key probe each, and one probe per aggregate among them
 * (sql/cdc.ts): about 500 rows read.
 */
const CLASSIFY_SLICE = 500;

class PgCdcDispatcher implements CdcDispatcher {
  #state: CdcDispatcherState = 'created';
  readonly #options: CdcDispatcherOptions;
  readonly #schema: string;
  readonly #events = new TypedEmitter<CdcEventMap>();
  readonly #store: CandidateStore;
  readonly #worker: Dispatcher;
  readonly #sweeper: Dispatcher;
  readonly #statesSql: string;
  readonly #nextDueSql: string;
  readonly #reconnect: ReconnectDelayOptions;
  readonly #streamTimeoutMs: number;
  readonly #queryOptions: QueryOptions | undefined;
  #slot: string | undefined;
  #publication = '';
  #tracker = new ConfirmTracker(0n);
  #stream: WalStream | undefined;
  #streams = 0;
  #failures = 0;
  #paused = false;
  /** Rows of the transaction being streamed, until its COMMIT. */
  #open: string[] = [];
  #sentLsn: Lsn = 0n;
  #cycle: Promise<void> | undefined;
  #again = false;
  #timers = new Set<NodeJS.Timeout>();
  #nextCycle: NodeJS.Timeout | undefined;
  /** The wake-up at the next due time (see #wakeAtDue), apart from the re-check timer. */
  #dueTimer: NodeJS.Timeout | undefined;
  #dueAt = Infinity;
  /** The cycle about to run was started by #dueTimer: claim even without candidates. */
  #dueWake = false;
  #classifiedAt = 0;
  /** Candidates the state query did not find, since when (see #classify). */
  #missingSince = new Map<string, number>();

  constructor(options: CdcDispatcherOptions) {
    if (!options.replicationConnection)
      throw new OutboxValidationError('replicationConnection', 'is required (a pg ClientConfig)');
    this.#options = options;
    this.#schema = options.schema ?? DEFAULT_SCHEMA;
    quoteIdentifier(this.#schema);
    this.#store = new CandidateStore(options.executor, {
      schema: this.#schema,
      settleCommit: settleCommit(options.asyncSettle),
      statementTimeoutMs: options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS,
    });
    this.#store.onResolved = (rowIds) => {
      for (const id of rowIds) {
        this.#store.candidates.delete(id);
        this.#missingSince.delete(id);
        this.#tracker.resolve(id);
      }
    };
    this.#store.onError = (error) => this.#onDatabaseError(error);
    // A retry's due time is known the moment its settle returns: wake then, not after a later
    // look at the table (see #wakeAtDue).
    this.#store.onRetried = (delayMs) => this.#wakeAtDue(delayMs);
    const { sweepIntervalMs, executor, ...shared } = options;
    // The worker is never started: each WAL-driven cycle calls its drain(), which runs the polling
    // dispatcher's claim → publish → settle code on the candidate store.
    this.#worker = createDispatcher({
      ...shared,
      store: this.#store,
      id: `${options.id ?? 'cdc'}`,
    });
    this.#sweeper = createDispatcher({
      ...shared,
      executor,
      pollIntervalMs: sweepIntervalMs ?? 30_000,
      ...(options.id !== undefined && { id: `${options.id}-sweeper` }),
    });
    for (const event of ['dispatcher:claim:failure', 'dispatcher:settle:failure'] as const)
      this.#sweeper.on(event, ({ error }) => this.#onDatabaseError(error));
    this.#statesSql = candidateStatesSql(quoteIdentifier(this.#schema));
    this.#nextDueSql = nextDueSql(quoteIdentifier(this.#schema));
    this.#reconnect = { ...DEFAULT_RECONNECT_DELAY, ...options.reconnectDelay };
    this.#streamTimeoutMs = options.streamTimeoutMs ?? 10_000;
    const confirmMs = options.confirmIntervalMs ?? 1_000;
    if (!(this.#streamTimeoutMs > confirmMs))
      throw new OutboxValidationError(
        'streamTimeoutMs',
        `must be a number greater than confirmIntervalMs (${confirmMs}), got ${String(options.streamTimeoutMs)}`,
      );
    const timeoutMs = options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS;
    this.#queryOptions = timeoutMs > 0 ? { timeoutMs } : undefined;
  }

  get state(): CdcDispatcherState {
    return this.#state;
  }

  get slotName(): string | undefined {
    return this.#slot;
  }

  get confirmedLsn(): string {
    return formatLsn(this.#tracker.confirmed);
  }

  on: CdcDispatcher['on'] = (event, listener) => {
    if (event.startsWith('cdc:')) return this.#events.on(event, listener);
    const offs = [this.#worker, this.#sweeper].map((d) => d.on(event as never, listener as never));
    return () => offs.forEach((off) => off());
  };

  stats(): ReturnType<CdcDispatcher['stats']> {
    return { cdc: this.#worker.stats(), sweeper: this.#sweeper.stats() };
  }

  totals(): DispatcherStats {
    const { cdc, sweeper } = this.stats();
    const sum = { ...cdc };
    for (const key of Object.keys(sum) as (keyof DispatcherStats)[]) sum[key] += sweeper[key];
    return sum;
  }

  async slotLagBytes(): Promise<number | null> {
    return this.#slot ? readSlotLag(this.#options.executor, this.#slot) : null;
  }

  async start(): Promise<void> {
    if (this.#state !== 'created') throw new Error(`CDC dispatcher is ${this.#state}`);
    const { executor } = this.#options;
    const database = await currentDatabase(executor);
    this.#slot = this.#options.slotName ?? defaultSlotName(database, this.#schema);
    this.#publication = this.#options.publicationName ?? defaultPublicationName(this.#schema);
    await ensurePublication(executor, this.#publication, this.#schema);
    const slot = await ensureSlot(executor, this.#slot, database);
    if (slot.created)
      this.#events.emit('cdc:slot:create', { slot: this.#slot, lsn: formatLsn(slot.confirmedLsn) });
    this.#tracker = new ConfirmTracker(slot.confirmedLsn);
    this.#sentLsn = slot.confirmedLsn;
    this.#state = 'running';
    this.#sweeper.start();
    this.#every(this.#options.confirmIntervalMs ?? 1_000, () => void this.#confirm(true));
    this.#every(this.#options.lagIntervalMs ?? 10_000, () => void this.#reportLag());
    await this.#openStream();
  }

  async stop(): Promise<void> {
    if (this.#state === 'stopped' || this.#state === 'stopping') return;
    const wasRunning = this.#state === 'running';
    this.#state = 'stopping';
    for (const timer of this.#timers) clearInterval(timer);
    clearTimeout(this.#nextCycle);
    clearTimeout(this.#dueTimer);
    if (wasRunning) {
      // Finish the cycle in flight (no new one starts: #kick checks the state), confirm what it
      // settled, then close. Commits arriving now are not confirmed and will be re-streamed.
      await this.#cycle;
      await this.#confirm(false);
      await this.#stream?.close();
      this.#stream = undefined;
      await this.#sweeper.stop();
    }
    this.#state = 'stopped';
  }

  #every(ms: number, fn: () => void): void {
    const timer = setInterval(fn, ms);
    timer.unref();
    this.#timers.add(timer);
  }

  async #openStream(): Promise<void> {
    if (this.#state !== 'running' || this.#stream) return;
    this.#tracker.reset();
    this.#open = [];
    const startLsn = this.#tracker.confirmed;
    try {
      const stream = await openWalStream({
        connection: this.#options.replicationConnection,
        slot: this.#slot!,
        publication: this.#publication,
        schema: this.#schema,
        table: 'outbox',
        startLsn,
        silenceTimeoutMs: this.#streamTimeoutMs,
        handlers: {
          begin: () => {
            this.#open = [];
            this.#tracker.begin();
          },
          insert: (rowId) => this.#open.push(rowId),
          commit: (endLsn) => this.#onCommit(endLsn),
          keepalive: (lsn, reply) => {
            this.#tracker.keepalive(lsn);
            if (reply) void this.#confirm(false);
          },
          lost: (error) => this.#onLost(stream, error),
        },
      });
      if ((this.#state as CdcDispatcherState) !== 'running') {
        await stream.close();
        return;
      }
      this.#stream = stream;
      this.#failures = 0;
      this.#events.emit('cdc:stream:start', {
        slot: this.#slot!,
        lsn: formatLsn(startLsn),
        reconnect: this.#streams++ > 0,
      });
      // Candidates kept across a reconnect (and anything the sweeper left) get a cycle now.
      this.#kick();
    } catch (error) {
      this.#scheduleReopen(await this.#recreateIfGone(toError(error)));
    }
  }

  /**
   * The slot is gone: a failover to a standby that did not have it (PostgreSQL 16 and older copy
   * no logical slot to standbys; 17+ can, see docs/failure-handling.md), or dropped by hand.
   * Create it anew, here, so streaming resumes from now on, and have the sweeper claim at once:
   * rows committed between the old slot's confirmed position and the new slot's creation are
   * never streamed, and would otherwise wait for its next interval. Returns the error to report,
   * saying what happened.
   */
  async #recreateIfGone(error: Error): Promise<Error> {
    if (!isSlotMissing(error) || this.#state !== 'running') return error;
    try {
      const { executor } = this.#options;
      const database = await currentDatabase(executor);
      await ensurePublication(executor, this.#publication, this.#schema);
      const slot = await ensureSlot(executor, this.#slot!, database);
      if (slot.created) {
        this.#tracker = new ConfirmTracker(slot.confirmedLsn);
        this.#sentLsn = slot.confirmedLsn;
        this.#events.emit('cdc:slot:create', {
          slot: this.#slot!,
          lsn: formatLsn(slot.confirmedLsn),
        });
      }
      this.#sweeper.wake();
      return new Error(
        `replication slot "${this.#slot!}" was gone (a failover to a standby without it, or dropped): recreated at ${formatLsn(slot.confirmedLsn)}; the sweeper publishes what was committed before (${error.message})`,
        { cause: error },
      );
    } catch (recreate) {
      return new Error(
        `replication slot "${this.#slot!}" is gone and could not be recreated: ${toError(recreate).message}; retrying (${error.message})`,
        { cause: error },
      );
    }
  }

  #onCommit(endLsn: Lsn): void {
    const rows = this.#open;
    this.#open = [];
    for (const id of rows) this.#store.candidates.add(id);
    this.#tracker.commit(endLsn, rows);
    if (rows.length > 0)
      this.#events.emit('cdc:transaction:receive', { lsn: formatLsn(endLsn), rowIds: rows });
    const max = this.#options.maxCandidates ?? 100_000;
    if (!this.#paused && this.#store.candidates.size >= max) {
      // Stop reading: resuming from the confirmed position later re-streams what we skip now.
      this.#paused = true;
      this.#events.emit('cdc:stream:pause', { candidates: this.#store.candidates.size });
      const stream = this.#stream;
      this.#stream = undefined;
      void stream?.close();
    }
    if (rows.length > 0) this.#kick();
  }

  #onLost(stream: WalStream, error: Error): void {
    if (this.#stream !== stream) return;
    this.#stream = undefined;
    void stream.close();
    this.#scheduleReopen(error);
  }

  /**
   * The database is going away (shutdown, restart, network): let go of the stream at once,
   * whichever statement noticed — a claim or settle of the worker (each attempt, through the
   * store), the sweeper's, or a statement of the cycle. A shutting-down server waits for its
   * walsenders to be confirmed up to what they sent, which we cannot do without settling, and a
   * cycle can be waiting for exactly that: settles retried until they go through (a deferred one
   * has no deadline). Holding on stalled the shutdown until the settle's lease ran out (30 s),
   * or for good. We reopen from the confirmed position once it is back.
   */
  #onDatabaseError(error: unknown): void {
    if (isConnectionLoss(error) && this.#stream) this.#onLost(this.#stream, toError(error));
  }

  #scheduleReopen(error: Error): void {
    if (this.#state !== 'running') return;
    const retryInMs = reconnectDelayMs(this.#failures++, this.#reconnect);
    this.#events.emit('cdc:stream:lost', { error, retryInMs });
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      void this.#openStream();
    }, retryInMs);
    timer.unref();
    this.#timers.add(timer);
  }

  /** Runs a cycle now, or right after the running one (never two at once). */
  #kick(): void {
    if (this.#state !== 'running') return;
    if (this.#cycle) {
      this.#again = true;
      return;
    }
    clearTimeout(this.#nextCycle);
    this.#cycle = this.#runCycle().finally(() => {
      this.#cycle = undefined;
      if (this.#again && this.#state === 'running') {
        this.#again = false;
        this.#kick();
      }
    });
  }

  /**
   * Publish what is due (the polling claim: sql/cdc.ts), then find out where the candidates left
   * stand, so their WAL positions can be confirmed.
   *
   * When to claim again without a commit is decided where each due time becomes known, never by
   * a later look that can come too late: a retry's backoff when its settle returns
   * (`onRetried`), a deferred candidate's wait in the same statement that found it deferred
   * (#classify). Earlier, both were read after the cycle with `nextDueSql` ("the next due time
   * AFTER now"): a retry whose backoff ran out before that read — a slow cycle, a statement
   * queued behind others on a loaded machine — was found by nothing but the sweeper, and its
   * aggregate waited behind it (30 s by default) instead of its backoff (cdc.test.ts slows that
   * read past the backoff: nothing was published after 30 s).
   *
   * A due wake-up still runs `nextDueSql` once, BEFORE its claim (#lookAhead): it finds the next
   * due time (delayed deliveries, other dispatchers' backoffs), and a wake-up that came before
   * the database's clock reached the due time (a timer rounds to whole milliseconds) finds the
   * same row and is set again. Before the claim, not after: every row is then either due at the
   * claim (which takes it) or still ahead of the look (which wakes for it). Run after the claim,
   * the look missed a row that fell due between the two statements — neither claimed nor ahead —
   * and left it to the sweeper: 300 ms between them on a loaded machine were enough (cdc.test.ts
   * "a wake-up that comes before the server considers the retry due", 1 failure under load).
   */
  async #runCycle(): Promise<void> {
    let nextInMs: number | undefined;
    const dueWake = this.#dueWake;
    this.#dueWake = false;
    try {
      // Without candidates only a due time is worth a claim: the sweeper has the rest.
      if (this.#store.candidates.size === 0 && !dueWake) return;
      // After a due wake-up, the next due time is read BEFORE the claim (see above).
      if (dueWake) await this.#lookAhead();
      await this.#worker.drain();
      // Everything settled (onResolved resolved it): nothing left to classify. New commits
      // arrived meanwhile: publish them first (the next cycle starts right away) and classify —
      // which only serves confirmation — at most every CLASSIFY_EVERY_MS.
      const classify =
        this.#store.candidates.size > 0 &&
        !(this.#again && Date.now() - this.#classifiedAt < CLASSIFY_EVERY_MS);
      if (classify) {
        this.#classifiedAt = Date.now();
        nextInMs = await this.#classify();
      }
      if (!classify && this.#store.candidates.size > 0) return; // the next cycle runs at once
    } catch (error) {
      this.#events.emit('cdc:cycle:failure', { error: toError(error) });
      nextInMs = this.#options.recheckMs ?? 250;
      this.#onDatabaseError(error);
    }
    await this.#confirm(false);
    if (
      this.#paused &&
      this.#store.candidates.size < (this.#options.maxCandidates ?? 100_000) / 2
    ) {
      this.#paused = false;
      void this.#openStream();
    }
    if (nextInMs !== undefined && this.#state === 'running') {
      clearTimeout(this.#nextCycle);
      this.#nextCycle = setTimeout(() => this.#kick(), nextInMs);
      this.#nextCycle.unref();
    }
  }

  /**
   * Wakes at the next due time ahead of now (sql/cdc.ts nextDueSql), if any. A failed look does
   * not stop the claim after it, and is itself due again after `recheckMs`: otherwise the
   * re-check cycle, which has no due wake-up of its own, would not look again.
   */
  async #lookAhead(): Promise<void> {
    try {
      const { rows } = await this.#options.executor.query<{ dueInMs: string }>(
        this.#nextDueSql,
        [],
        this.#queryOptions,
      );
      if (rows[0]) this.#wakeAtDue(Number(rows[0].dueInMs));
    } catch (error) {
      this.#events.emit('cdc:cycle:failure', { error: toError(error) });
      this.#onDatabaseError(error);
      this.#wakeAtDue(this.#options.recheckMs ?? 250);
    }
  }

  /**
   * Claims again in `dueInMs` (a message falls due then: backoff, delayed delivery), unless an
   * earlier wake-up is set already. Further than `maxHoldMs` is the sweeper's. A timer of its
   * own: the re-check timer is reset by every cycle, and a due time must not be lost with it.
   */
  #wakeAtDue(dueInMs: number): void {
    if (this.#state !== 'running' || dueInMs > (this.#options.maxHoldMs ?? 60_000)) return;
    const at = Date.now() + Math.max(dueInMs, 1);
    if (at >= this.#dueAt) return;
    clearTimeout(this.#dueTimer);
    this.#dueAt = at;
    this.#dueTimer = setTimeout(() => {
      this.#dueTimer = undefined;
      this.#dueAt = Infinity;
      this.#dueWake = true;
      this.#kick();
    }, at - Date.now());
    this.#dueTimer.unref();
  }

  /**
   * Reads where the oldest candidates stand and resolves their positions; returns when to look
   * again. Bounded (issue 16): one query reads CLASSIFY_SLICE candidates, the oldest — the
   * confirmed position cannot pass the first unresolved one, so reading those behind it would
   * move nothing. The next slice is read only when this one is resolved entirely, so the work
   * follows the rows that move, not the candidates that wait: 20,000 candidates blocked behind
   * one aggregate's head cost a slice per look, and 20,000 published by another dispatcher cost
   * 40 slices once.
   */
  async #classify(): Promise<number | undefined> {
    let recheckInMs: number | undefined;
    for (;;) {
      const slice: string[] = [];
      for (const id of this.#store.candidates) {
        if (slice.length === CLASSIFY_SLICE) break;
        slice.push(id);
      }
      if (slice.length === 0) return recheckInMs;
      const { rows } = await this.#options.executor.query<CandidateState>(
        this.#statesSql,
        [slice],
        this.#queryOptions,
      );
      const found = classifyCandidates(
        rows,
        {
          candidates: this.#store.candidates,
          missingSince: this.#missingSince,
          resolve: (id) => this.#tracker.resolve(id),
        },
        {
          now: Date.now(),
          recheckMs: this.#options.recheckMs ?? 250,
          maxHoldMs: this.#options.maxHoldMs ?? 60_000,
        },
      );
      // Deferred (not due, or behind a head that is not due): claim again when it is.
      if (found.dueInMs !== undefined) this.#wakeAtDue(found.dueInMs);
      if (found.recheckInMs !== undefined)
        recheckInMs = Math.min(recheckInMs ?? Infinity, found.recheckInMs);
      if (slice.some((id) => this.#store.candidates.has(id))) return recheckInMs;
    }
  }

  async #confirm(ping: boolean): Promise<void> {
    const stream = this.#stream;
    const lsn = this.#tracker.confirmed;
    if (!stream) return;
    try {
      await stream.confirm(lsn, ping);
    } catch {
      return; // the stream's own error handling reopens it
    }
    if (lsn > this.#sentLsn) {
      this.#sentLsn = lsn;
      this.#events.emit('cdc:lsn:confirm', { lsn: formatLsn(lsn) });
    }
  }

  async #reportLag(): Promise<void> {
    try {
      const lagBytes = await this.slotLagBytes();
      if (lagBytes !== null) this.#events.emit('cdc:slot:lag', { slot: this.#slot!, lagBytes });
    } catch {
      /* a failed lag read is not worth an error event; the next one will tell */
    }
  }
}

/**
 * Creates a CDC dispatcher: logical replication (`pgoutput`) tells it the moment an outbox row is
 * committed, and it publishes that row through the polling dispatcher's own claim → publish →
 * settle path (leases, fencing, per-aggregate order, backoff, dead letters — identical
 * semantics). The slot is confirmed only up to the last transaction whose rows are all
 * published, dead-lettered, or recorded as failed/deferred in the table. A polling sweeper with a
 * long interval publishes whatever the stream did not deliver (rows from before the slot, rows
 * deferred past `maxHoldMs`, anything during an outage).
 *
 * @example
 * ```ts
 * const cdc = createCdcDispatcher({
 *   executor: fromPg(pool),
 *   replicationConnection: { connectionString: process.env.DATABASE_URL },
 *   publisher,
 * });
 * cdc.on('cdc:slot:lag', ({ lagBytes }) => slotLagGauge.set(lagBytes));
 * await cdc.start();
 * process.on('SIGTERM', () => cdc.stop().then(() => pool.end()));
 * ```
 */
export function createCdcDispatcher(options: CdcDispatcherOptions): CdcDispatcher {
  return new PgCdcDispatcher(options);
}
