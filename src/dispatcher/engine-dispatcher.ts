import { readDatabaseEngine } from '../admin/database-engine.js';
import { backoffDelayMs } from '../core/backoff.js';
import { OutboxValidationError } from '../core/errors.js';
import { createLaneDispatcher } from '../lanes/lane-dispatcher.js';
import { withStatementTimeout } from '../store/statement-timeout.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import type { Dispatcher, DispatcherState, DrainResult } from './dispatcher.js';
import { emptyStats, type DispatcherStats } from './dispatcher-stats.js';
import { TypedEmitter, type DispatcherEventMap } from './events.js';
import { DEFAULT_STATEMENT_TIMEOUT_MS, type DispatcherOptions } from './options.js';
import { addUnorderedTopics } from './unordered-topics.js';

/** How long a failed read of the engine record waits before the next (as a failed claim). */
const CHOICE_RETRY = { baseMs: 100, maxMs: 5_000, jitterMs: 100 };

/**
 * What `createDispatcher` returns when it is to follow the schema's engine (migration 036) or was
 * told `engine: 'lanes'`: one `Dispatcher` that becomes the claim engine's polling dispatcher or a
 * lane dispatcher, once it knows which, and passes everything on to it.
 *
 * States (`state`): `created` until `start()`; `running` while it reads the record (retrying
 * with backoff and a `dispatcher:claim:failure` event each time it cannot: the database is down,
 * or it records lanes while options only the claim engine takes are given) and then what the
 * chosen dispatcher says; `stopping`, `stopped` as any dispatcher. `drain()` reads the record
 * once and throws what stops it, as a claim error.
 *
 * Why a dispatcher that chooses late and not an async factory: `createDispatcher()` is
 * synchronous in every caller's code, and a schema that moves to lanes (`outbox engine lanes`)
 * must be followed by a process restarted with the same code.
 */
export class EngineDispatcher implements Dispatcher {
  readonly id: string;
  readonly #options: DispatcherOptions;
  /** Built at once when the engine is known (its options are then checked at once). */
  readonly #claims: Dispatcher | undefined;
  readonly #lanes: { dispatcher: Dispatcher; executor: SqlExecutor } | undefined;
  readonly #events = new TypedEmitter<DispatcherEventMap>();
  /** Event names someone listens to: forwarded from the chosen dispatcher. */
  readonly #wanted = new Set<keyof DispatcherEventMap>();
  readonly #forwarded = new Set<keyof DispatcherEventMap>();
  #inner: Dispatcher | undefined;
  #state: DispatcherState = 'created';
  #running: Promise<void> | undefined;
  #wakeRetry: (() => void) | undefined;

  /**
   * `claims`: the polling dispatcher, built by the caller (its options checked), run when the
   * record says claims; undefined when told `engine: 'lanes'`, whose dispatcher is built here.
   */
  constructor(options: DispatcherOptions, claims: Dispatcher | undefined) {
    this.#options = options;
    this.#claims = claims;
    if (!claims) {
      refuseClaimOnlyOptions(options, "engine: 'lanes'");
      this.#lanes = laneDispatcherFor(options);
    }
    this.id = claims?.id ?? this.#lanes!.dispatcher.id;
  }

  get state(): DispatcherState {
    return this.#inner && this.#inner.state !== 'created' ? this.#inner.state : this.#state;
  }

  on: Dispatcher['on'] = (event, listener) => {
    this.#wanted.add(event);
    this.#forward(event);
    return this.#events.on(event, listener);
  };

  stats(): DispatcherStats {
    return this.#inner?.stats() ?? emptyStats();
  }

  start(): void {
    if (this.#state !== 'created')
      throw new Error(`dispatcher is ${this.#state}; create a new one to start again`);
    this.#state = 'running';
    this.#running = this.#chooseWithRetry().then((inner) => {
      if (inner && this.#state === 'running') inner.start();
    });
  }

  async stop(): Promise<void> {
    if (this.#state === 'stopped') return;
    if (this.#state === 'created') {
      this.#state = 'stopped';
      return;
    }
    this.#state = 'stopping';
    this.#wakeRetry?.();
    await this.#running;
    if (this.#inner && this.#inner.state !== 'created') await this.#inner.stop();
    this.#state = 'stopped';
  }

  wake(): void {
    this.#inner?.wake();
  }

  async onIdle(): Promise<void> {
    await this.#running;
    await this.#inner?.onIdle();
  }

  async drain(): Promise<DrainResult> {
    if (this.#state !== 'created')
      throw new Error(`drain() runs on a dispatcher that was not started (state: ${this.#state})`);
    const inner = this.#inner ?? (await this.#choose());
    return inner.drain();
  }

  /** The chosen dispatcher, or undefined when stopped before one could be chosen. */
  async #chooseWithRetry(): Promise<Dispatcher | undefined> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#choose();
      } catch (error) {
        if (this.#state !== 'running') return undefined;
        const retryInMs = backoffDelayMs(attempt, CHOICE_RETRY);
        this.#events.emit('dispatcher:claim:failure', { error: error as Error, retryInMs });
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, retryInMs);
          this.#wakeRetry = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        if (this.#state !== 'running') return undefined;
      }
    }
  }

  async #choose(): Promise<Dispatcher> {
    const { executor, schema } = this.#options;
    let lanes = this.#lanes;
    if (!lanes) {
      const engine = await readDatabaseEngine(executor!, schema === undefined ? {} : { schema });
      if (engine === 'claims') return this.#adopt(this.#claims!);
      refuseClaimOnlyOptions(this.#options, `schema "${schema ?? 'public'}" records lanes`);
      lanes = laneDispatcherFor({ ...this.#options, id: this.id });
    }
    await addUnorderedTopics(lanes.executor, this.#options.unorderedTopics ?? [], {
      ...(schema !== undefined && { schema }),
    });
    return this.#adopt(lanes.dispatcher);
  }

  #adopt(inner: Dispatcher): Dispatcher {
    this.#inner = inner;
    for (const event of this.#wanted) this.#forward(event);
    return inner;
  }

  #forward(event: keyof DispatcherEventMap): void {
    if (!this.#inner || this.#forwarded.has(event)) return;
    this.#forwarded.add(event);
    this.#inner.on(event, (...args) => this.#events.emit(event, ...args));
  }
}

/**
 * Options of the claim engine's dispatcher that the lanes engine does not take, refused with
 * why rather than ignored (as `outbox dispatch --engine lanes` refuses their flags).
 */
function refuseClaimOnlyOptions(options: DispatcherOptions, why: string): void {
  const refused = (name: string, reason: string) =>
    new OutboxValidationError(name, `is not taken by the lanes engine (${why}): ${reason}`);
  if (options.store)
    throw refused('store', 'give an executor (fromPg(pool)); the lanes engine runs on Postgres');
  if (options.asyncSettle || options.asyncClaim)
    throw refused(
      options.asyncSettle ? 'asyncSettle' : 'asyncClaim',
      "it commits a batch's cursor moves with the next read, in one call (see asyncCommit of createLaneDispatcher)",
    );
  if (options.claimShape !== undefined && options.claimShape !== 'auto')
    throw refused('claimShape', 'it reads each lane after its cursor; it has no claim shape');
}

/**
 * The lane dispatcher for the claim engine's options: the same names, its own defaults where
 * they differ (batch 500, poll 200 ms), every statement bounded by `statementTimeoutMs` as the
 * claim engine's are.
 */
function laneDispatcherFor(options: DispatcherOptions): {
  dispatcher: Dispatcher;
  executor: SqlExecutor;
} {
  const executor = withStatementTimeout(
    options.executor!,
    options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS,
  );
  const dispatcher = createLaneDispatcher({
    executor,
    publisher: options.publisher,
    ...(options.schema !== undefined && { schema: options.schema }),
    ...(options.id !== undefined && { id: options.id }),
    ...(options.batchSize !== undefined && { batchSize: options.batchSize }),
    ...(options.leaseMs !== undefined && { leaseMs: options.leaseMs }),
    ...(options.pollIntervalMs !== undefined && { pollIntervalMs: options.pollIntervalMs }),
    ...(options.maxAttempts !== undefined && { maxAttempts: options.maxAttempts }),
    ...(options.backoff !== undefined && { backoff: options.backoff }),
    ...(options.deadLetterPolicy !== undefined && { deadLetterPolicy: options.deadLetterPolicy }),
    ...(options.concurrency !== undefined && { concurrency: options.concurrency }),
    ...(options.wakeSource !== undefined && { wakeSource: options.wakeSource }),
    ...(options.routePause !== undefined && { routePause: options.routePause }),
    ...(options.rateLimits !== undefined && { rateLimits: options.rateLimits }),
  });
  return { dispatcher, executor };
}
