import { EngineDispatcher } from './engine-dispatcher.js';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { OutboxValidationError } from '../core/errors.js';
import type { Publisher } from '../publishers/publisher.js';
import { BatchSettler } from './batch-settler.js';
import { ClaimLoop, newPipeline, settleBehind } from './claim-loop.js';
import { emptyStats, statsSince, type DispatcherStats } from './dispatcher-stats.js';
import { TypedEmitter, type DispatcherEventMap } from './events.js';
import { IdleTracker } from './idle-tracker.js';
import {
  resolveDispatcherOptions,
  type DispatcherOptions,
  type ResolvedDispatcherOptions,
} from './options.js';
import type { OutboxStore } from './outbox-store.js';
import { PgOutboxStore } from './pg-outbox-store.js';
import { watchReadOnly } from './read-only-watch.js';
import { RouteGate } from './route-gate.js';
import { WakeUps } from './wake-ups.js';

export type { DispatcherStats } from './dispatcher-stats.js';

/**
 * Lifecycle of a dispatcher:
 *
 * - `created`  — constructed; `drain()` may run batches on demand; `start()` → running.
 * - `running`  — `concurrency` loops each repeat: claim → publish → settle; after a claim that
 *                found nothing, wait for the poll interval or a `wake()`.
 * - `stopping` — `stop()` was called: no new claims; in-flight batches finish publishing (bounded by
 *                the lease) and settle; leases of messages not yet handed to the publisher are
 *                released. → stopped.
 * - `stopped`  — final. A stopped dispatcher cannot be restarted; create a new one.
 *
 * A batch, per message: claimed (lease + attempts+1) → published | retryable | permanent | not
 * tried → settled as dispatched | retry (backoff) | dead letter | released (an ordered run stops
 * at its first failure: the rest goes back unpublished, attempt given back). If settling fails
 * the lease simply expires and the message is claimed and published again, with the same message
 * id (at least once, never lost). A settle the store defers (a writer of the aggregate is
 * mid-transaction) keeps its lease and is retried until it goes through (batch-settler.ts).
 *
 * The transitions are made here; the work of each state is done by parts: the claim → publish →
 * settle cycle in claim-loop.ts, settling in batch-settler.ts, paused routes and rate limits in
 * route-gate.ts, sleeps and the wake source in wake-ups.ts, `onIdle()` in idle-tracker.ts.
 */
export type DispatcherState = 'created' | 'running' | 'stopping' | 'stopped';

/** What {@link Dispatcher.drain} did. */
export interface DrainResult extends DispatcherStats {
  /** True when anything failed: a publish that was not `published`, or a settle failure. */
  failed: boolean;
}

/** The polling dispatcher. Create with {@link createDispatcher}. */
export interface Dispatcher {
  /** Identifies this dispatcher in lease owners (`<id>#<claim number>`). */
  readonly id: string;
  readonly state: DispatcherState;
  /** Starts the claim loops. */
  start(): void;
  /** Stops claiming, finishes or releases in-flight work, resolves when done. Idempotent. */
  stop(): Promise<void>;
  /** Claim now instead of waiting for the poll interval (a hint: polling stays the guarantee). */
  wake(): void;
  /**
   * Resolves when nothing is in flight and the latest claim found nothing due. Resolves at once
   * when that already holds.
   */
  onIdle(): Promise<void>;
  /**
   * Runs batches until a claim finds nothing due (the `--once` mode). Claim errors are thrown.
   * Not to be combined with `start()`.
   */
  drain(): Promise<DrainResult>;
  stats(): DispatcherStats;
  on: TypedEmitter<DispatcherEventMap>['on'];
}

class PollingDispatcher implements Dispatcher {
  readonly id: string;
  #state: DispatcherState = 'created';
  readonly #options: ResolvedDispatcherOptions;
  readonly #store: OutboxStore;
  readonly #events = new TypedEmitter<DispatcherEventMap>();
  readonly #stats: DispatcherStats = emptyStats();
  #workers: Promise<void>[] = [];
  readonly #idle = new IdleTracker(() => this.#events.emit('dispatcher:idle'));
  readonly #wakeUps: WakeUps;
  readonly #settler: BatchSettler;
  readonly #loop: ClaimLoop;
  #stoppingSince = 0;

  constructor(options: DispatcherOptions) {
    this.#options = resolveDispatcherOptions(options);
    if (!options.publisher || typeof options.publisher.publish !== 'function') {
      throw new OutboxValidationError(
        'publisher',
        'must be a Publisher (an object with publish(messages))',
      );
    }
    const publisher: Publisher = options.publisher;
    if (options.store) this.#store = options.store;
    else if (options.executor)
      this.#store = new PgOutboxStore(options.executor, {
        schema: this.#options.schema,
        settleCommit: this.#options.settleCommit,
        claimCommit: this.#options.claimCommit,
        statementTimeoutMs: this.#options.statementTimeoutMs,
      });
    else
      throw new OutboxValidationError(
        'executor',
        'give an executor (e.g. fromPg(pool)) or a store',
      );
    this.id = options.id ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    this.#wakeUps = new WakeUps(options.wakeSource, this.#events);
    // Read-only spells of the database, told once each (events.ts).
    watchReadOnly(this.#events);
    const parts = {
      options: this.#options,
      store: this.#store,
      stats: this.#stats,
      events: this.#events,
      idle: this.#idle,
      wake: () => this.wake(),
    };
    this.#settler = new BatchSettler({
      ...parts,
      stopRequestedAt: () =>
        this.#state === 'running' || this.#state === 'created' ? undefined : this.#stoppingSince,
    });
    this.#loop = new ClaimLoop({
      ...parts,
      id: this.id,
      publisher,
      executor: options.executor,
      wakeUps: this.#wakeUps,
      // Paused routes and rate limits (destination-limits.ts); only with an executor.
      routes: new RouteGate({ ...parts, executor: options.executor, publisher }),
      settler: this.#settler,
      running: () => this.#state === 'running',
      stopping: () => this.#state === 'stopping',
    });
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
    for (let i = 0; i < this.#options.concurrency; i++) this.#workers.push(this.#loop.run());
  }

  async stop(): Promise<void> {
    if (this.#state === 'stopped') return;
    if (this.#state === 'created') {
      this.#state = 'stopped';
      return;
    }
    if (this.#state === 'running') this.#state = 'stopping';
    this.#stoppingSince = Date.now();
    this.#wakeUps.wake();
    await Promise.all(this.#workers);
    await this.#settler.allDeferredSettled();
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
    const unsubscribe = [
      this.on('dispatcher:publish:outcome', ({ outcome }) => {
        if (outcome.status !== 'published') failed = true;
      }),
      this.on('dispatcher:settle:failure', () => (failed = true)),
    ];
    const pipeline = newPipeline();
    try {
      for (;;) {
        if ((await this.#loop.runBatch({ throwClaimErrors: true, pipeline })) > 0) continue;
        // Nothing due — unless a settle still running makes an ordered successor due: wait for
        // it and look once more. Done only when a claim finds nothing with nothing in flight.
        if (await settleBehind(pipeline)) continue;
        if (!this.#settler.deferring) break;
        await this.#settler.deferredSettled();
      }
    } finally {
      await pipeline.settling;
      await this.#settler.allDeferredSettled();
      unsubscribe.forEach((off) => off());
    }
    return { ...statsSince(before, this.stats()), failed };
  }
}

/**
 * Creates the dispatcher of the schema's engine (`engine`, default: the one the schema records,
 * migration 036, read at `start()` or `drain()`): the claim engine's polling dispatcher, or the
 * lanes engine's (`createLaneDispatcher`) with the same options. With a `store`, the claim
 * engine's.
 *
 * @example
 * ```ts
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * const dispatcher = createDispatcher({
 *   executor: fromPg(pool),
 *   publisher: new HttpPublisher({ url: 'https://hooks.example.com/outbox' }),
 *   unorderedTopics: ['mail.*'],
 * });
 * dispatcher.start();
 * process.on('SIGTERM', () => dispatcher.stop().then(() => pool.end()));
 * ```
 */
export function createDispatcher(options: DispatcherOptions): Dispatcher {
  const engine = options?.engine;
  if (engine === 'lanes') return new EngineDispatcher(options, undefined);
  if (engine !== undefined && engine !== 'claims')
    throw new OutboxValidationError(
      'engine',
      `must be 'claims' or 'lanes', got ${JSON.stringify(engine)}`,
    );
  const claims = new PollingDispatcher(options);
  // A store is the claim engine's interface; without an executor there is no record to read.
  if (engine === 'claims' || options.store || !options.executor) return claims;
  return new EngineDispatcher(options, claims);
}
