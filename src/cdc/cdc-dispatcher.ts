import { OutboxValidationError } from '../core/errors.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import {
  createDispatcher,
  type Dispatcher,
  type DispatcherStats,
} from '../dispatcher/dispatcher.js';
import { TypedEmitter } from '../dispatcher/events.js';
import { DEFAULT_STATEMENT_TIMEOUT_MS, settleCommit } from '../dispatcher/options.js';
import {
  DEFAULT_RECONNECT_DELAY,
  reconnectDelayMs,
  type ReconnectDelayOptions,
} from '../dispatcher/wake/reconnect-delay.js';
import { CandidateStore } from './candidate-store.js';
import { ConfirmTracker } from './confirm-tracker.js';
import type { CdcEventMap } from './events.js';
import { toError } from '../core/errors.js';
import { isConnectionLoss, isSlotMissing, type CdcDispatcherOptions } from './options.js';
import { formatLsn, type Lsn } from './lsn.js';
import {
  currentDatabase,
  defaultPublicationName,
  defaultSlotName,
  ensurePublication,
  ensureSlot,
  readSlotLag,
  recreateSlot,
} from './slot.js';
import { PublishCycle } from './publish-cycle.js';
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

class PgCdcDispatcher implements CdcDispatcher {
  #state: CdcDispatcherState = 'created';
  readonly #options: CdcDispatcherOptions;
  readonly #schema: string;
  readonly #events = new TypedEmitter<CdcEventMap>();
  readonly #store: CandidateStore;
  readonly #worker: Dispatcher;
  readonly #sweeper: Dispatcher;
  readonly #cycles: PublishCycle;
  readonly #reconnect: ReconnectDelayOptions;
  readonly #streamTimeoutMs: number;
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
  #timers = new Set<NodeJS.Timeout>();

  constructor(options: CdcDispatcherOptions) {
    if (!options.replicationConnection)
      throw new OutboxValidationError('replicationConnection', 'is required (a pg ClientConfig)');
    this.#options = options;
    this.#schema = options.schema ?? DEFAULT_SCHEMA;
    quoteIdentifier(this.#schema);
    this.#store = new CandidateStore(options.executor, {
      schema: this.#schema,
      settleCommit: settleCommit(options.asyncSettle),
      // The stream's claims commit as the sweeper's do (createDispatcher reads the same option):
      // one outbox, one claim commit mode.
      claimCommit: options.asyncClaim ? 'async' : 'sync',
      statementTimeoutMs: options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS,
    });
    this.#store.onResolved = (rowIds) => this.#cycles.resolved(rowIds);
    this.#store.onError = (error) => this.#onDatabaseError(error);
    // A retry's due time is known the moment its settle returns: wake then, not after a later
    // look at the table (see PublishCycle.wakeAtDue).
    this.#store.onRetried = (delayMs) => this.#cycles.wakeAtDue(delayMs);
    const { sweepIntervalMs, executor, ...shared } = options;
    // The worker is never started: each WAL-driven cycle calls its drain(), which runs the polling
    // dispatcher's claim → publish → settle code on the candidate store.
    // The claim engine's: the WAL it follows is the `outbox` table's.
    this.#worker = createDispatcher({
      ...shared,
      engine: 'claims',
      store: this.#store,
      id: `${options.id ?? 'cdc'}`,
    });
    this.#sweeper = createDispatcher({
      ...shared,
      engine: 'claims',
      executor,
      pollIntervalMs: sweepIntervalMs ?? 30_000,
      ...(options.id !== undefined && { id: `${options.id}-sweeper` }),
    });
    for (const event of ['dispatcher:claim:failure', 'dispatcher:settle:failure'] as const)
      this.#sweeper.on(event, ({ error }) => this.#onDatabaseError(error));
    this.#reconnect = { ...DEFAULT_RECONNECT_DELAY, ...options.reconnectDelay };
    this.#streamTimeoutMs = options.streamTimeoutMs ?? 10_000;
    const confirmMs = options.confirmIntervalMs ?? 1_000;
    if (!(this.#streamTimeoutMs > confirmMs))
      throw new OutboxValidationError(
        'streamTimeoutMs',
        `must be a number greater than confirmIntervalMs (${confirmMs}), got ${String(options.streamTimeoutMs)}`,
      );
    const timeoutMs = options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS;
    this.#cycles = new PublishCycle(
      {
        options,
        schema: this.#schema,
        store: this.#store,
        worker: this.#worker,
        events: this.#events,
        running: () => this.#state === 'running',
        resolve: (id) => this.#tracker.resolve(id),
        afterCycle: () => this.#afterCycle(),
        onDatabaseError: (error) => this.#onDatabaseError(error),
      },
      timeoutMs > 0 ? { timeoutMs } : undefined,
    );
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
    this.#cycles.clearTimers();
    if (wasRunning) {
      // Finish the cycle in flight (no new one starts: kick() checks the state), confirm what it
      // settled, then close. Commits arriving now are not confirmed and will be re-streamed.
      await this.#cycles.current;
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
      this.#cycles.kick();
    } catch (error) {
      this.#scheduleReopen(await this.#recreateIfGone(toError(error)));
    }
  }

  /**
   * The slot is gone (see recreateSlot): it is created anew, and the sweeper claims at once: rows
   * committed between the old slot's confirmed position and the new slot's creation are never
   * streamed, and would otherwise wait for its next interval. Returns the error to report, saying
   * what happened.
   */
  async #recreateIfGone(error: Error): Promise<Error> {
    if (!isSlotMissing(error) || this.#state !== 'running') return error;
    const names = { slot: this.#slot!, publication: this.#publication, schema: this.#schema };
    return recreateSlot(this.#options.executor, names, error, (slot) => {
      if (slot.created) {
        this.#tracker = new ConfirmTracker(slot.confirmedLsn);
        this.#sentLsn = slot.confirmedLsn;
        this.#events.emit('cdc:slot:create', {
          slot: this.#slot!,
          lsn: formatLsn(slot.confirmedLsn),
        });
      }
      this.#sweeper.wake();
    });
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
    if (rows.length > 0) this.#cycles.kick();
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

  /** After each publish cycle: confirm what it resolved; resume a paused stream once the
   * candidates are down to half of `maxCandidates`. */
  async #afterCycle(): Promise<void> {
    await this.#confirm(false);
    if (
      this.#paused &&
      this.#store.candidates.size < (this.#options.maxCandidates ?? 100_000) / 2
    ) {
      this.#paused = false;
      void this.#openStream();
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
