import { OutboxValidationError } from '../core/errors.js';
import { errorText } from '../publishers/publisher.js';
import { D1OutboxStore } from './d1-outbox-store.js';
import type { D1Db, QueueProducer } from './d1-types.js';
import {
  createScheduledDispatcher,
  positiveInteger,
  type DispatchRunSummary,
  type ScheduledDispatcher,
  type ScheduledDispatcherOptions,
} from './scheduled-dispatcher.js';

/** The structural subset of a Durable Object's `DurableObjectState` (`ctx`) used here. */
export interface DurableObjectStateLike {
  readonly storage: {
    getAlarm(): Promise<number | null>;
    setAlarm(scheduledTime: number | Date): Promise<void>;
  };
  waitUntil?(promise: Promise<unknown>): void;
}

/** Options of {@link OutboxDispatcherObject}: the scheduled dispatcher's, plus its alarm. */
export interface DispatcherObjectOptions extends ScheduledDispatcherOptions {
  /**
   * The alarm's interval right after a run that found work; it doubles after each run that found
   * none, up to `alarmMaxIntervalMs`. Default 1 000.
   */
  alarmMinIntervalMs?: number;
  /**
   * The longest the object sleeps while idle: what a message written WITHOUT a wake-up waits at
   * most (plus one run). Default 30 000. A message due later (`delayMs`, a retry backing off)
   * sets the alarm to its due time.
   */
  alarmMaxIntervalMs?: number;
  /**
   * Called with the error of a failed run (a D1 or Queue outage): the object then retries on its
   * alarm, backing off, and `GET /status` shows `lastError`. Default: `console.error`, which
   * Workers Logs and `wrangler tail` show.
   */
  onError?: (error: unknown) => void;
}

/** What {@link OutboxDispatcherObject} reports at `GET /status` (since this instance started). */
export interface DispatcherObjectStatus extends Pick<
  DispatchRunSummary,
  'claimed' | 'published' | 'retried' | 'deadLettered' | 'released' | 'fenced'
> {
  /** When this instance started (ms): a restart or eviction shows as a new value. */
  startedAt: number;
  /** Wake-ups received (`POST /wake`). */
  wakes: number;
  /** Alarms that fired. */
  alarms: number;
  /** Dispatcher runs (each claims until drained or out of time). */
  runs: number;
  /** Passes that stopped at `timeBudgetMs` with work left (the alarm continued at once). */
  timeBudgetStops: number;
  /** When the last run ended (ms), if any. */
  lastRunAt: number | null;
  /** The last run's error, if it failed (the alarm then backs off). */
  lastError: string | null;
  /** The alarm this instance last set (ms), if known. */
  alarmAt: number | null;
  /** The current idle interval (ms). */
  idleIntervalMs: number;
}

const WAKE_PATH = '/wake';
interface Runtime {
  onError: (error: unknown) => void;
  dispatcher: ScheduledDispatcher;
  store: D1OutboxStore;
  leaseMs: number;
  timeBudgetMs: number;
  minMs: number;
  maxMs: number;
  now: () => number;
}

const STATUS_PATH = '/status';

/**
 * The outbox dispatcher as a Durable Object (issue 21): the same claim → send → fenced settle
 * cycle as the Cron dispatcher (it runs `createScheduledDispatcher`), started by a wake-up right
 * after a Worker commits (`wakeDispatcher`), with the object's alarm as the safety net.
 *
 * One instance per outbox (the wake-up addresses it by name, default `"outbox"`), so one claimer
 * at a time runs in it; a Cron dispatcher next to it stays correct through the leases, as two
 * Cron runs do. Its life:
 *
 * - **idle** → `POST /wake` or the alarm → **running**: runs are repeated while wake-ups keep
 *   arriving during a run (one that arrived after the last empty claim gets one more run); each run
 *   claims until nothing is due or `timeBudgetMs` is spent, and so does the whole pass.
 * - **running** → **idle**, setting the alarm: at once when the time budget ran out (work remains:
 *   the next alarm continues in a fresh invocation); at the next due time of a delayed or backing
 *   off message, or after the idle interval — `alarmMinIntervalMs` after a run that found work,
 *   doubling up to `alarmMaxIntervalMs` while runs find none — whichever is sooner; after a failed
 *   run, the error backs off on the same doubling.
 * - Before each run the alarm is brought forward to at most `leaseMs` away, so an instance evicted
 *   or restarted mid-run is resumed by its alarm about when the leases of its interrupted batch
 *   expire: what it sent and did not settle goes again (same message ids), nothing is lost.
 *
 * Use it: export it (or a subclass) from your Worker module, bind it, and migrate it (see
 * docs/cloudflare.md and examples/cloudflare/wrangler.toml). It reads `env.DB` and `env.QUEUE`;
 * for other bindings or options, override {@link OutboxDispatcherObject.dispatcherOptions}.
 *
 * @example
 * ```ts
 * export { OutboxDispatcherObject } from 'agent-outbox/cloudflare';
 * // wrangler.toml: [[durable_objects.bindings]] name = "OUTBOX_DISPATCHER"
 * //                class_name = "OutboxDispatcherObject"
 * ```
 */
export class OutboxDispatcherObject {
  readonly #state: DurableObjectStateLike;
  readonly #env: unknown;
  #runtime: Runtime | undefined;
  #running: Promise<void> | undefined;
  /** Set by every wake-up and alarm; a run clears it when it starts. */
  #again = false;
  /** The alarm as this instance last knew it; `undefined` until read once. */
  #alarmAt: number | null | undefined;
  #failures = 0;
  readonly #status: DispatcherObjectStatus;

  constructor(state: DurableObjectStateLike, env: unknown) {
    this.#state = state;
    this.#env = env;
    this.#status = {
      startedAt: Date.now(),
      wakes: 0,
      alarms: 0,
      runs: 0,
      timeBudgetStops: 0,
      claimed: 0,
      published: 0,
      retried: 0,
      deadLettered: 0,
      released: 0,
      fenced: 0,
      lastRunAt: null,
      lastError: null,
      alarmAt: null,
      idleIntervalMs: 0,
    };
  }

  /**
   * The dispatcher's options, read once per instance. Default: `{ db: env.DB, queue: env.QUEUE }`.
   * Override to use other bindings or set options (from `env` vars, for instance).
   */
  protected dispatcherOptions(env: unknown): DispatcherObjectOptions {
    const bindings = env as { DB?: D1Db; QUEUE?: QueueProducer } | undefined;
    if (!bindings?.DB)
      throw new OutboxValidationError('env.DB', 'bind the outbox D1 database as DB');
    return { db: bindings.DB, ...(bindings.QUEUE ? { queue: bindings.QUEUE } : {}) };
  }

  /** `POST /wake`: dispatch now (answers 202 at once). `GET /status`: {@link DispatcherObjectStatus}. */
  async fetch(request: Request): Promise<Response> {
    const { pathname } = new URL(request.url);
    if (pathname === WAKE_PATH) {
      this.#status.wakes += 1;
      // Failed runs are reported in the loop; what reaches here is the object itself failing
      // (its options, its storage): say so, the alarm or the next wake-up tries again.
      void this.#kick().catch((error: unknown) =>
        console.error('agent-outbox: dispatcher object failed:', error),
      );
      return new Response(null, { status: 202 });
    }
    if (pathname === STATUS_PATH) return Response.json(this.#status);
    return new Response('not found', { status: 404 });
  }

  /** The safety net: dispatches, then sets the next alarm. */
  async alarm(): Promise<void> {
    this.#status.alarms += 1;
    this.#alarmAt = undefined; // this one is spent: read the storage again before relying on it
    await this.#kick();
  }

  #kick(): Promise<void> {
    this.#again = true;
    if (!this.#running) {
      this.#running = this.#loop().finally(() => {
        this.#running = undefined;
      });
      this.#state.waitUntil?.(this.#running);
    }
    return this.#running;
  }

  #setup(): Runtime {
    const options = this.dispatcherOptions(this.#env);
    const now = options.now ?? Date.now;
    const minMs = positiveInteger('alarmMinIntervalMs', options.alarmMinIntervalMs, 1_000);
    const maxMs = positiveInteger('alarmMaxIntervalMs', options.alarmMaxIntervalMs, 30_000);
    if (maxMs < minMs)
      throw new OutboxValidationError('alarmMaxIntervalMs', 'must be at least alarmMinIntervalMs');
    this.#status.idleIntervalMs = minMs;
    return {
      onError:
        options.onError ??
        ((error: unknown) => console.error('agent-outbox: dispatcher run failed:', error)),
      dispatcher: createScheduledDispatcher(options),
      store: new D1OutboxStore(options.db, now),
      leaseMs: positiveInteger('leaseMs', options.leaseMs, 60_000),
      timeBudgetMs: positiveInteger('timeBudgetMs', options.timeBudgetMs, 25_000),
      minMs,
      maxMs,
      now,
    };
  }

  async #loop(): Promise<void> {
    const runtime = (this.#runtime ??= this.#setup());
    for (;;) {
      let outcome: 'drained' | 'time-budget' | 'failed' = 'drained';
      let worked = false;
      const started = runtime.now();
      let runStarted = started;
      await this.#alarmNoLaterThan(started + runtime.leaseMs);
      while (this.#again) {
        // Wake-ups arriving without pause would keep one invocation running: the time budget
        // bounds the whole pass, not only each run, and the alarm continues in a fresh one.
        if (runtime.now() - started >= runtime.timeBudgetMs) {
          outcome = 'time-budget';
          break;
        }
        this.#again = false;
        let summary: DispatchRunSummary;
        runStarted = runtime.now();
        try {
          summary = await runtime.dispatcher.run();
        } catch (error) {
          this.#status.lastError = errorText(error);
          outcome = 'failed';
          try {
            runtime.onError(error);
          } catch {
            // An observer's error must not stop the alarm from being set.
          }
          break;
        }
        this.#record(summary);
        if (summary.claimed > 0) worked = true;
        if (summary.stoppedBy === 'time-budget') {
          outcome = 'time-budget';
          break;
        }
      }
      if (outcome === 'time-budget') this.#status.timeBudgetStops += 1;
      await this.#scheduleNext(outcome, worked, runStarted);
      // A wake-up that arrived while the alarm was being set still gets its run.
      if (outcome !== 'drained' || !this.#again) return;
    }
  }

  #record(summary: DispatchRunSummary): void {
    const s = this.#status;
    s.runs += 1;
    s.claimed += summary.claimed;
    s.published += summary.published;
    s.retried += summary.retried;
    s.deadLettered += summary.deadLettered;
    s.released += summary.released;
    s.fenced += summary.fenced;
    s.lastRunAt = Date.now();
    s.lastError = null;
    this.#failures = 0;
  }

  async #scheduleNext(
    outcome: 'drained' | 'time-budget' | 'failed',
    worked: boolean,
    lastRunStarted: number,
  ) {
    const runtime = this.#runtime!;
    const now = runtime.now();
    let next: number;
    if (outcome === 'time-budget') {
      next = now;
    } else if (outcome === 'failed') {
      this.#failures += 1;
      next = now + Math.min(runtime.minMs * 2 ** (this.#failures - 1), runtime.maxMs);
    } else {
      const idle = worked
        ? runtime.minMs
        : Math.min(this.#status.idleIntervalMs * 2, runtime.maxMs);
      this.#status.idleIntervalMs = idle;
      // Due after the last run started, not after now: what became due while it was claiming
      // has a time in the past, and the alarm fires at once for it.
      const due = await runtime.store.nextDueAt(lastRunStarted).catch(() => undefined);
      next = Math.min(now + idle, due ?? Infinity);
    }
    await this.#setAlarm(next);
  }

  async #alarmNoLaterThan(time: number): Promise<void> {
    if (this.#alarmAt === undefined) this.#alarmAt = await this.#state.storage.getAlarm();
    if (this.#alarmAt === null || this.#alarmAt > time) await this.#setAlarm(time);
  }

  async #setAlarm(time: number): Promise<void> {
    await this.#state.storage.setAlarm(time);
    this.#alarmAt = time;
    this.#status.alarmAt = time;
  }
}

/** The structural subset of a `DurableObjectNamespace` binding used by {@link wakeDispatcher}. */
export interface DurableObjectNamespaceLike {
  idFromName(name: string): unknown;
  get(id: unknown): {
    fetch(
      input: string,
      init?: { method?: string },
    ): Promise<{ ok: boolean; text(): Promise<string> }>;
  };
}

/**
 * Wakes the outbox's {@link OutboxDispatcherObject} so it dispatches right away: call it after
 * `env.DB.batch([...])` committed messages, in `ctx.waitUntil(...)` so the response does not wait.
 * One Durable Object request; it never throws and returns whether the object took the wake-up — a
 * lost one costs only latency (the object's alarm comes anyway). `name` picks the outbox when a
 * Worker has several (default `"outbox"`); every caller of one outbox must use the same name.
 *
 * @example
 * ```ts
 * await env.DB.batch([insertOrder, ...enqueue(env.DB, messages)]);
 * ctx.waitUntil(wakeDispatcher(env.OUTBOX_DISPATCHER));
 * ```
 */
export async function wakeDispatcher(
  namespace: DurableObjectNamespaceLike,
  options: { name?: string } = {},
): Promise<boolean> {
  try {
    const id = namespace.idFromName(options.name ?? 'outbox');
    const response = await namespace
      .get(id)
      .fetch(`https://agent-outbox.internal${WAKE_PATH}`, { method: 'POST' });
    await response.text();
    return response.ok;
  } catch {
    return false;
  }
}

/** Reads the status of the outbox's {@link OutboxDispatcherObject} (for health checks and tests). */
export async function dispatcherStatus(
  namespace: DurableObjectNamespaceLike,
  options: { name?: string } = {},
): Promise<DispatcherObjectStatus> {
  const id = namespace.idFromName(options.name ?? 'outbox');
  const response = await namespace
    .get(id)
    .fetch(`https://agent-outbox.internal${STATUS_PATH}`, { method: 'GET' });
  const text = await response.text();
  if (!response.ok) throw new Error(`dispatcher status: ${text}`);
  return JSON.parse(text) as DispatcherObjectStatus;
}
