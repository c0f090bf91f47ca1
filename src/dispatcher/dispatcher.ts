import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { OutboxValidationError } from '../core/errors.js';
import type { OutgoingMessage, Publisher } from '../publishers/publisher.js';
import { TypedEmitter, type DispatcherEventMap } from './events.js';
import {
  resolveDispatcherOptions,
  type DispatcherOptions,
  type ResolvedDispatcherOptions,
} from './options.js';
import { addUnorderedTopics } from './unordered-topics.js';
import { DestinationLimits } from './destination-limits.js';
import { declareRateLimits } from './rate-limits.js';
import { Router } from '../publishers/router.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { publishInOrder, type MessageFate } from './ordered-publish.js';
import { startBatchTrace, traceClaimFailure } from './dispatch-spans.js';
import { prepareClaims } from './repair-heads.js';
import type { OutboxStore, Settlement } from './outbox-store.js';
import { PgOutboxStore } from './pg-outbox-store.js';
import { planSettlement } from './settle-plan.js';
import type { WakeSource } from './wake-source.js';

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
 * mid-transaction) keeps its lease and is retried until it goes through (`#deferredSettles`).
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
  /**
   * Messages of ordered runs given back unpublished, behind a failure in their run (or out of
   * time): released without an attempt counted.
   */
  released: number;
  /**
   * Settles put off because a writer of the aggregate was mid-transaction (sql/settle.ts); each
   * is retried shortly until it goes through.
   */
  deferred: number;
  /**
   * Messages given back without an attempt to wait for their route (issue 27): paused, probing,
   * over its rate limit, or failed only because the destination was down.
   */
  postponed: number;
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
  readonly #events = new TypedEmitter<DispatcherEventMap>();
  readonly #stats: DispatcherStats = {
    batches: 0,
    claimed: 0,
    published: 0,
    retried: 0,
    deadLettered: 0,
    shadowed: 0,
    released: 0,
    deferred: 0,
    postponed: 0,
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
  /** Retries of deferred settles (see #retryDeferred). */
  readonly #deferredSettles = new Set<Promise<void>>();
  #stoppingSince = 0;
  readonly #executor: SqlExecutor | undefined;
  #prepared: Promise<void> | undefined;
  /** Paused routes and rate limits (destination-limits.ts); only with an executor. */
  readonly #limits: DestinationLimits | undefined;

  constructor(options: DispatcherOptions) {
    this.#options = resolveDispatcherOptions(options);
    if (!options.publisher || typeof options.publisher.publish !== 'function') {
      throw new OutboxValidationError(
        'publisher',
        'must be a Publisher (an object with publish(messages))',
      );
    }
    this.#publisher = options.publisher;
    this.#executor = options.executor;
    if (options.store) this.#store = options.store;
    else if (options.executor)
      this.#store = new PgOutboxStore(options.executor, {
        schema: this.#options.schema,
        settleCommit: this.#options.settleCommit,
        statementTimeoutMs: this.#options.statementTimeoutMs,
      });
    else
      throw new OutboxValidationError(
        'executor',
        'give an executor (e.g. fromPg(pool)) or a store',
      );
    this.id = options.id ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    this.#wakeSource = options.wakeSource;
    const publisher = this.#publisher;
    this.#limits = options.executor
      ? new DestinationLimits({
          executor: options.executor,
          schema: this.#options.schema,
          // A route: the Router's route a topic takes (`*` for its fallback or a lone publisher).
          routeOf:
            publisher instanceof Router
              ? (topic) => publisher.routeFor(topic)?.pattern ?? '*'
              : () => '*',
          pause: this.#options.routePause,
          leaseMs: this.#options.leaseMs,
        })
      : undefined;
  }

  /**
   * Once, before the first claim (retried with the next claim if it fails):
   * - `unorderedTopics` (and `--unordered`) are declared in `outbox_unordered_topics`, so they
   *   apply to messages WRITTEN from then on, for every dispatcher — order is no longer a
   *   per-dispatcher view at claim time (two dispatchers with different lists would send one
   *   aggregate out of order);
   * - heads left unmarked by a dispatcher older than migration 009 are marked ready, during the
   *   seven days after an upgrade across it (repair-heads.ts `prepareClaims`).
   */
  async #prepare(): Promise<void> {
    if (!this.#executor) return;
    try {
      const globs = this.#options.unorderedTopics;
      if (globs.length > 0)
        await addUnorderedTopics(this.#executor, globs, { schema: this.#options.schema });
      if (this.#options.rateLimits.length > 0)
        await declareRateLimits(this.#executor, this.#options.rateLimits, {
          schema: this.#options.schema,
        });
      await prepareClaims(this.#executor, { schema: this.#options.schema });
    } catch (error) {
      this.#prepared = undefined;
      throw error;
    }
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
    this.#stoppingSince = Date.now();
    this.#wakeSleepers();
    await Promise.all(this.#workers);
    while (this.#deferredSettles.size > 0) await Promise.all([...this.#deferredSettles]);
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
        if (await settleBehind(pipeline)) continue;
        if (this.#deferredSettles.size === 0) break;
        await Promise.all([...this.#deferredSettles]);
      }
    } finally {
      await pipeline.settling;
      while (this.#deferredSettles.size > 0) await Promise.all([...this.#deferredSettles]);
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
        await (this.#prepared ??= this.#prepare());
        messages = await this.#store.claim({
          owner,
          batchSize: this.#options.batchSize,
          leaseMs: this.#options.leaseMs,
          deadLettersBlock: this.#options.deadLetterPolicy === 'hold',
        });
        this.#consecutiveClaimFailures = 0;
      } catch (error) {
        this.#consecutiveClaimFailures++;
        this.#stats.claimFailures++;
        const err = toError(error);
        traceClaimFailure(this.id, owner, started, err);
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
      // Undefined without an OpenTelemetry SDK: then no span work at all (dispatch-spans.ts).
      const batch = startBatchTrace(this.id, owner, messages, started);

      if (this.#state === 'stopping') {
        // Nothing was handed to the publisher yet: give the messages back right away.
        await this.#store
          .release(
            owner,
            messages.map((m) => m.rowId),
          )
          .catch(() => undefined);
        batch?.end(messages.map((m) => ({ rowId: m.rowId, kind: 'release' })));
        return 0;
      }

      // Publish runs in order (ordered-publish.ts); abandon publishing well before the lease runs
      // out, so no other dispatcher can claim these messages while a publish might still be
      // delivering them (G3).
      // Paused routes and rate limits (issue 27): what may not go now is given back, unpublished.
      const gate = await this.#gate(owner, messages);
      if (!gate) {
        batch?.end(messages.map((m) => ({ rowId: m.rowId, kind: 'release' })));
        return 0;
      }
      const sending = gate.send;
      const fates = await publishInOrder(this.#publisher, sending, {
        maxAttempts: this.#options.maxAttempts,
        deadline: leaseDeadline - Math.max(500, this.#options.leaseMs * 0.1),
        timeoutError: `publish did not finish within the lease (${this.#options.leaseMs} ms)`,
        trace: batch,
        onOutcomes: (sent, outcomes, durationMs) =>
          sent.forEach((message, i) =>
            this.#events.emit('dispatcher:publish:outcome', {
              message,
              outcome: outcomes[i]!,
              durationMs,
            }),
          ),
      });
      const settlements = sending.map((m, i) => this.#settlementOf(m, fates[i]!));
      if (this.#limits) {
        const routes = await this.#limits
          .review(owner, sending, fates, settlements, gate.probes)
          .catch(() => ({ paused: [], resumed: [] }));
        routes.paused.forEach((route) => this.#events.emit('dispatcher:route:paused', { route }));
        routes.resumed.forEach((route) => this.#events.emit('dispatcher:route:resumed', { route }));
        if (routes.resumed.length > 0) this.wake();
        settlements.push(...gate.held);
      }
      await pipeline.settling;
      this.#inFlight++;
      pipeline.pending = true;
      const settle = () => this.#settle(owner, settlements, messages, leaseDeadline);
      pipeline.settling = (batch ? batch.within(settle) : settle()).finally(() => {
        this.#inFlight--;
        this.#notifyIdle();
        batch?.end(settlements);
      });
      return messages.length;
    } finally {
      this.#inFlight--;
      this.#notifyIdle();
    }
  }

  /**
   * The claim's messages split by {@link DestinationLimits.gate}; everything goes when there are
   * no limits. If the gate cannot be read, the claim is given back (attempts too) and counted as
   * a failed claim: publishing past a limit nobody could check is what it exists to prevent.
   */
  async #gate(owner: string, messages: OutgoingMessage[]) {
    if (!this.#limits)
      return { send: messages, held: [], probes: new Map<string, OutgoingMessage>() };
    try {
      return await this.#limits.gate(owner, messages);
    } catch (error) {
      await this.#store
        .release(
          owner,
          messages.map((m) => m.rowId),
        )
        .catch(() => undefined);
      this.#consecutiveClaimFailures++;
      this.#stats.claimFailures++;
      this.#events.emit('dispatcher:claim:failure', {
        error: toError(error),
        retryInMs: this.#claimRetryDelay(),
      });
      return undefined;
    }
  }

  #settlementOf(message: OutgoingMessage, fate: MessageFate): Settlement {
    const rowId = message.rowId;
    switch (fate.kind) {
      case 'outcome':
        return planSettlement(message, fate.outcome, this.#options);
      case 'shadow':
        return { rowId, kind: 'shadow' };
      case 'unsent':
        return { rowId, kind: 'release' };
      case 'exhausted':
        // Claimed more often than allowed without ever settling: earlier attempts died
        // mid-publish (crash, kill -9, OOM). Dead-letter instead of crash-looping on a poison
        // message.
        return {
          rowId,
          kind: 'dead',
          error: `gave up after ${message.attempts - 1} attempts that never settled (dispatcher crash or lease expiry)`,
        };
    }
  }

  /**
   * Settles, retrying while we still hold the lease. Settlements the store defers (sql/settle.ts:
   * a writer of the aggregate is mid-transaction) are handed to {@link #retryDeferred}, off this
   * loop's pipeline: a long transaction of one aggregate must not hold up the others.
   */
  async #settle(
    owner: string,
    settlements: Settlement[],
    messages: OutgoingMessage[],
    leaseDeadline: number,
  ): Promise<void> {
    const started = Date.now();
    for (let attempt = 0; ; attempt++) {
      try {
        const { settled, fenced, deferred } = await this.#applySettle(owner, settlements, messages);
        this.#events.emit('dispatcher:settle:success', {
          owner,
          settled,
          fenced,
          durationMs: Date.now() - started,
        });
        if (deferred.length > 0) {
          this.#stats.deferred += deferred.length;
          this.#retryDeferred(owner, deferred, messages);
        }
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

  /** One store settle: counts what it settled and fenced; returns what it deferred. */
  async #applySettle(owner: string, settlements: Settlement[], messages: OutgoingMessage[]) {
    const result = await this.#store.settle(owner, settlements, this.#settleRequest());
    this.#count(settlements, new Set(result.settled), messages);
    const deferredIds = new Set(result.deferred);
    const fenced = settlements.length - result.settled.length - deferredIds.size;
    this.#stats.fenced += fenced;
    const deferred = settlements.filter((s) => deferredIds.has(s.rowId));
    return { settled: result.settled.length, fenced, deferred };
  }

  #settleRequest() {
    return {
      deadLettersBlock: this.#options.deadLetterPolicy === 'hold',
      leaseMs: this.#options.leaseMs,
    };
  }

  #count(settlements: Settlement[], settled: Set<string>, messages: OutgoingMessage[]): void {
    for (const s of settlements) {
      if (!settled.has(s.rowId)) continue;
      if (s.kind === 'published') this.#stats.published++;
      else if (s.kind === 'shadow') this.#stats.shadowed++;
      else if (s.kind === 'retry') this.#stats.retried++;
      else if (s.kind === 'release') this.#stats.released++;
      else if (s.kind === 'defer') this.#stats.postponed++;
      else {
        this.#stats.deadLettered++;
        const message = messages.find((m) => m.rowId === s.rowId);
        if (message) this.#events.emit('dispatcher:dead-letter', { message, error: s.error });
      }
    }
  }

  /**
   * Settles deferred rows again, soon and then less often (2 ms doubling to 100 ms), until the
   * writer that held their aggregate has committed. Each deferral extends the rows' lease, so a
   * long writer transaction does not make them expire and go out twice. It gives up one lease
   * after the last answer (the database went away) or one lease after stop(): the rows are then
   * published again once their lease expires (at least once).
   */
  #retryDeferred(owner: string, settlements: Settlement[], messages: OutgoingMessage[]): void {
    this.#inFlight++;
    const run = (async () => {
      // The rows are ours while their lease lasts, and each deferral extends it: stop when it has
      // run out since the last answer (a database that went away), or one lease after stop().
      let leaseUntil = Date.now() + this.#options.leaseMs;
      const giveUpAt = () =>
        Math.min(
          leaseUntil,
          this.#state === 'running' || this.#state === 'created'
            ? Infinity
            : this.#stoppingSince + this.#options.leaseMs,
        );
      let pending = settlements;
      for (
        let delay = 2;
        pending.length > 0 && Date.now() < giveUpAt();
        delay = Math.min(100, delay * 2)
      ) {
        await new Promise((resolve) => setTimeout(resolve, delay));
        try {
          const asked = Date.now();
          pending = (await this.#applySettle(owner, pending, messages)).deferred;
          leaseUntil = asked + this.#options.leaseMs;
        } catch (error) {
          this.#events.emit('dispatcher:settle:failure', {
            owner,
            error: toError(error),
            messages: pending.length,
          });
        }
      }
      if (pending.length > 0) this.#stats.settleFailures++;
    })();
    this.#deferredSettles.add(run);
    void run.finally(() => {
      this.#deferredSettles.delete(run);
      this.#inFlight--;
      this.#notifyIdle();
      // A deferred settle that went through may have made a successor ready.
      this.wake();
    });
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
