import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { OutboxValidationError } from '../core/errors.js';
import {
  errorText,
  type OutgoingMessage,
  type PublishOutcome,
  type Publisher,
} from '../publishers/publisher.js';
import { TypedEmitter, type DispatcherEventMap } from './events.js';
import {
  resolveDispatcherOptions,
  type DispatcherOptions,
  type ResolvedDispatcherOptions,
} from './options.js';
import type { OutboxStore, Settlement } from './outbox-store.js';
import { PgOutboxStore } from './pg-outbox-store.js';
import { planSettlement } from './settle-plan.js';
import type { WakeSource } from './wake-source.js';
import { globToLike } from './topic-patterns.js';

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
 * A batch, per message: claimed (lease + attempts+1) → published | retryable | permanent →
 * settled as dispatched | retry (backoff) | dead letter. If settling fails the lease simply
 * expires and the message is claimed and published again, with the same message id (at least
 * once, never lost).
 */
export type DispatcherState = 'created' | 'running' | 'stopping' | 'stopped';

/** Counters since the dispatcher was created. */
export interface DispatcherStats {
  batches: number;
  claimed: number;
  published: number;
  retried: number;
  deadLettered: number;
  /** Shadow messages settled without publishing. */
  shadowed: number;
  /** Settlements refused because the lease had passed to another claim (fencing). */
  fenced: number;
  claimFailures: number;
  settleFailures: number;
}

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

const CLAIM_RETRY_MAX_MS = 30_000;

class PollingDispatcher implements Dispatcher {
  readonly id: string;
  #state: DispatcherState = 'created';
  readonly #options: ResolvedDispatcherOptions;
  readonly #store: OutboxStore;
  readonly #publisher: Publisher;
  readonly #unorderedLike: string[];
  readonly #events = new TypedEmitter<DispatcherEventMap>();
  readonly #stats: DispatcherStats = {
    batches: 0,
    claimed: 0,
    published: 0,
    retried: 0,
    deadLettered: 0,
    shadowed: 0,
    fenced: 0,
    claimFailures: 0,
    settleFailures: 0,
  };
  #claimNumber = 0;
  #workers: Promise<void>[] = [];
  #sleepers = new Set<() => void>();
  #inFlight = 0;
  #lastClaimEmpty = true;
  #idleWaiters: (() => void)[] = [];
  #consecutiveClaimFailures = 0;
  #wakeRequested = false;
  readonly #wakeSource: WakeSource | undefined;
  #armed = false;

  constructor(options: DispatcherOptions) {
    this.#options = resolveDispatcherOptions(options);
    if (!options.publisher || typeof options.publisher.publish !== 'function') {
      throw new OutboxValidationError(
        'publisher',
        'must be a Publisher (an object with publish(messages))',
      );
    }
    this.#publisher = options.publisher;
    if (options.store) this.#store = options.store;
    else if (options.executor)
      this.#store = new PgOutboxStore(options.executor, {
        schema: this.#options.schema,
        settleCommit: this.#options.settleCommit,
      });
    else
      throw new OutboxValidationError(
        'executor',
        'give an executor (e.g. fromPg(pool)) or a store',
      );
    this.#unorderedLike = this.#options.unorderedTopics.map(globToLike);
    this.id = options.id ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    this.#wakeSource = options.wakeSource;
  }

  async #callWakeSource(method: 'idle' | 'busy'): Promise<void> {
    try {
      await this.#wakeSource?.[method]?.();
    } catch (error) {
      this.#events.emit('dispatcher:wake-source:failure', { error: toError(error) });
    }
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
    if (this.#wakeSource) {
      this.#wakeSource
        .start(() => this.wake())
        .catch((error: unknown) =>
          this.#events.emit('dispatcher:wake-source:failure', { error: toError(error) }),
        );
    }
    for (let i = 0; i < this.#options.concurrency; i++) this.#workers.push(this.#loop());
  }

  async stop(): Promise<void> {
    if (this.#state === 'stopped') return;
    if (this.#state === 'created') {
      this.#state = 'stopped';
      return;
    }
    if (this.#state === 'running') this.#state = 'stopping';
    this.#wakeSleepers();
    await Promise.all(this.#workers);
    await this.#wakeSource?.stop().catch(() => undefined);
    if ((this.#state as DispatcherState) !== 'stopped') {
      this.#state = 'stopped';
      this.#events.emit('dispatcher:stop', { owner: this.id });
    }
  }

  wake(): void {
    this.#wakeSleepers();
  }

  onIdle(): Promise<void> {
    if (this.#isIdle()) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
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
        if ((await this.#runBatch({ throwClaimErrors: true, pipeline })) > 0) continue;
        // Nothing due — unless a settle still running makes an ordered successor due: wait for
        // it and look once more. Done only when a claim finds nothing with nothing in flight.
        if (!(await settleBehind(pipeline))) break;
      }
    } finally {
      await pipeline.settling;
      unsubscribe.forEach((off) => off());
    }
    const after = this.stats();
    const diff = Object.fromEntries(
      Object.entries(after).map(([k, v]) => [k, v - before[k as keyof DispatcherStats]]),
    ) as unknown as DispatcherStats;
    return { ...diff, failed };
  }

  async #loop(): Promise<void> {
    const pipeline = newPipeline();
    try {
      await this.#loopWith(pipeline);
    } finally {
      await pipeline.settling;
    }
  }

  async #loopWith(pipeline: Pipeline): Promise<void> {
    while (this.#state === 'running') {
      const claimed = await this.#runBatch({ throwClaimErrors: false, pipeline });
      if (this.#state !== 'running') break;
      if (claimed === 0 && (await settleBehind(pipeline))) continue;
      if (this.#wakeSource && this.#consecutiveClaimFailures === 0) {
        if (claimed === 0) {
          if (!this.#armed) {
            // Arm first, then claim once more: work committed before arming is found by that
            // claim, work committed after it triggers a wake-up.
            this.#armed = true;
            await this.#callWakeSource('idle');
            continue;
          }
        } else if (this.#armed) {
          // Found work: producers can stop notifying until the next empty claim. Not awaited
          // (claiming must not wait for it; the source runs its statements in order, so a later
          // idle() still lands after this), and committed without waiting for the WAL flush (a
          // waiter row is ephemeral), so a flip costs two cheap statements on the listening
          // connection. Measured against staying armed through bursts of 250 ms (the previous
          // policy, which saved two flushed writes per flip), interleaved runs: notify p95
          // 4.0–4.8 vs 4.8–5.7 ms at 1,000 msg/s; producers at 8 clients 0.97–0.99 vs 0.94–0.97
          // of their throughput without wake-ups (bench/).
          this.#armed = false;
          void this.#callWakeSource('busy');
        }
      }
      // Claim again at once after any work: settling a head makes its successor due now, and a
      // poll-interval pause per ordered message would add up. Sleep only on an empty claim.
      if (claimed === 0) {
        const wait =
          this.#consecutiveClaimFailures > 0
            ? this.#claimRetryDelay()
            : this.#options.pollIntervalMs;
        await this.#sleep(wait);
      }
    }
  }

  #claimRetryDelay(): number {
    return Math.min(CLAIM_RETRY_MAX_MS, 250 * 2 ** Math.min(this.#consecutiveClaimFailures, 10));
  }

  /**
   * One claim → publish → settle cycle. Returns how many messages were claimed.
   *
   * The settle is handed to `pipeline` and not awaited: the next claim runs while this batch's
   * settle commits (on another connection of the pool), so a message committed meanwhile waits
   * for one statement, not two (issue 7, latency). The batch's rows stay leased until the settle
   * commits, so the overlapping claim skips them, and an ordered successor becomes due only
   * then. At most one settle per loop is outstanding: the next hand-off waits for the last.
   */
  async #runBatch({
    throwClaimErrors,
    pipeline,
  }: {
    throwClaimErrors: boolean;
    pipeline: Pipeline;
  }): Promise<number> {
    const owner = `${this.id}#${++this.#claimNumber}`;
    this.#inFlight++;
    try {
      const started = Date.now();
      let messages: OutgoingMessage[];
      try {
        messages = await this.#store.claim({
          owner,
          batchSize: this.#options.batchSize,
          leaseMs: this.#options.leaseMs,
          unorderedPatterns: this.#unorderedLike,
          deadLettersBlock: this.#options.deadLetterPolicy === 'hold',
        });
        this.#consecutiveClaimFailures = 0;
      } catch (error) {
        this.#consecutiveClaimFailures++;
        this.#stats.claimFailures++;
        const err = toError(error);
        this.#events.emit('dispatcher:claim:failure', {
          error: err,
          retryInMs: this.#claimRetryDelay(),
        });
        if (throwClaimErrors) throw err;
        return 0;
      }
      const leaseDeadline = started + this.#options.leaseMs;
      // An empty claim while a settle is in flight proves nothing: that settle may make an
      // ordered successor due (the loop claims again once it is done).
      this.#lastClaimEmpty = messages.length === 0 && !pipeline.pending;
      this.#events.emit('dispatcher:claim:success', {
        owner,
        count: messages.length,
        durationMs: Date.now() - started,
      });
      if (messages.length === 0) return 0;
      this.#stats.batches++;
      this.#stats.claimed += messages.length;

      if (this.#state === 'stopping') {
        // Nothing was handed to the publisher yet: give the messages back right away.
        await this.#store
          .release(
            owner,
            messages.map((m) => m.rowId),
          )
          .catch(() => undefined);
        return 0;
      }

      // Claimed more often than allowed without ever settling: earlier attempts died mid-publish
      // (crash, kill -9, OOM). Dead-letter instead of crash-looping on a poison message.
      const exhausted = messages.filter((m) => m.attempts > this.#options.maxAttempts);
      // Shadow messages take the whole path except the publisher (retrofit shadow mode).
      const shadow = messages.filter((m) => m.shadow && m.attempts <= this.#options.maxAttempts);
      const toPublish = messages.filter(
        (m) => !m.shadow && m.attempts <= this.#options.maxAttempts,
      );
      const outcomes = await this.#publish(toPublish, leaseDeadline);
      const settlements: Settlement[] = exhausted.map((m) => ({
        rowId: m.rowId,
        kind: 'dead',
        error: `gave up after ${m.attempts - 1} attempts that never settled (dispatcher crash or lease expiry)`,
      }));
      for (const m of shadow) settlements.push({ rowId: m.rowId, kind: 'shadow' });
      toPublish.forEach((message, i) => {
        settlements.push(planSettlement(message, outcomes[i]!, this.#options));
      });
      await pipeline.settling;
      this.#inFlight++;
      pipeline.pending = true;
      pipeline.settling = this.#settle(owner, settlements, messages, leaseDeadline).finally(() => {
        this.#inFlight--;
        this.#notifyIdle();
      });
      return messages.length;
    } finally {
      this.#inFlight--;
      this.#notifyIdle();
    }
  }

  async #publish(messages: OutgoingMessage[], leaseDeadline: number): Promise<PublishOutcome[]> {
    if (messages.length === 0) return [];
    const started = Date.now();
    // Abandon the publish well before the lease runs out, so no other dispatcher can claim these
    // messages while this publish might still be delivering them (G3).
    const budget = leaseDeadline - started - Math.max(500, this.#options.leaseMs * 0.1);
    const controller = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), Math.max(0, budget));
    });
    let outcomes: PublishOutcome[];
    try {
      const result = await Promise.race([
        this.#publisher.publish(messages, { signal: controller.signal }),
        timedOut,
      ]);
      if (result === 'timeout') {
        controller.abort();
        outcomes = messages.map(() => ({
          status: 'retryable',
          error: `publish did not finish within the lease (${this.#options.leaseMs} ms)`,
        }));
      } else if (!Array.isArray(result) || result.length !== messages.length) {
        const got = Array.isArray(result) ? result.length : typeof result;
        outcomes = messages.map(() => ({
          status: 'retryable',
          error: `publisher returned ${got} outcomes for ${messages.length} messages`,
        }));
      } else {
        outcomes = result;
      }
    } catch (error) {
      outcomes = messages.map(() => ({ status: 'retryable', error: errorText(error) }));
    } finally {
      clearTimeout(timer);
    }
    const durationMs = Date.now() - started;
    messages.forEach((message, i) =>
      this.#events.emit('dispatcher:publish:outcome', {
        message,
        outcome: outcomes[i]!,
        durationMs,
      }),
    );
    return outcomes;
  }

  async #settle(
    owner: string,
    settlements: Settlement[],
    messages: OutgoingMessage[],
    leaseDeadline: number,
  ): Promise<void> {
    const started = Date.now();
    for (let attempt = 0; ; attempt++) {
      try {
        const settled = new Set(await this.#store.settle(owner, settlements));
        const fenced = settlements.length - settled.size;
        this.#stats.fenced += fenced;
        for (const s of settlements) {
          if (!settled.has(s.rowId)) continue;
          if (s.kind === 'published') this.#stats.published++;
          else if (s.kind === 'shadow') this.#stats.shadowed++;
          else if (s.kind === 'retry') this.#stats.retried++;
          else {
            this.#stats.deadLettered++;
            const message = messages.find((m) => m.rowId === s.rowId);
            if (message) this.#events.emit('dispatcher:dead-letter', { message, error: s.error });
          }
        }
        this.#events.emit('dispatcher:settle:success', {
          owner,
          settled: settled.size,
          fenced,
          durationMs: Date.now() - started,
        });
        return;
      } catch (error) {
        // Retry while we still hold the lease: a settled message is one less duplicate later.
        const delay = 200 * 2 ** attempt;
        if (Date.now() + delay >= leaseDeadline) {
          this.#stats.settleFailures++;
          this.#events.emit('dispatcher:settle:failure', {
            owner,
            error: toError(error),
            messages: settlements.length,
          });
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }

  #sleep(ms: number): Promise<void> {
    // A wake() that arrived while we were claiming must not be lost: skip this wait.
    if (this.#wakeRequested) {
      this.#wakeRequested = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#sleepers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#sleepers.add(done);
    });
  }

  #wakeSleepers(): void {
    if (this.#sleepers.size === 0) this.#wakeRequested = true;
    for (const wake of [...this.#sleepers]) wake();
  }

  #isIdle(): boolean {
    return this.#inFlight === 0 && this.#lastClaimEmpty;
  }

  #notifyIdle(): void {
    if (!this.#isIdle()) return;
    this.#events.emit('dispatcher:idle');
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    waiters.forEach((resolve) => resolve());
  }
}

/** A loop's settle in flight (see #runBatch). `#settle` never rejects. */
interface Pipeline {
  settling: Promise<void>;
  /** A settle was handed off since the last empty claim. */
  pending: boolean;
}

function newPipeline(): Pipeline {
  return { settling: Promise.resolve(), pending: false };
}

/**
 * After an empty claim: if a settle was handed off since, waits for it and returns true (claim
 * again: it may have made an ordered successor due). False: nothing is in flight.
 */
async function settleBehind(pipeline: Pipeline): Promise<boolean> {
  if (!pipeline.pending) return false;
  pipeline.pending = false;
  await pipeline.settling;
  return true;
}

function toError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/**
 * Creates a polling dispatcher.
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
  return new PollingDispatcher(options);
}
