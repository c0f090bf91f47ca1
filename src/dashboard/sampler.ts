import { readStatus } from '../admin/status.js';
import { quoteIdentifier } from '../core/identifier.js';
import { dispatchedSinceSql } from '../sql/dashboard.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/** One point of the dashboard's time series. */
export interface DashboardSample {
  /** Server time of the sample, ms since the epoch. */
  at: number;
  backlog: number;
  deadLetters: number;
  /** Messages dispatched per second since the previous sample (null for the first sample). */
  publishedPerSecond: number | null;
}

/**
 * Samples backlog, dead letters and the published rate every `intervalMs`, keeping the last
 * `capacity` samples in memory (default 720: an hour at 5 s). Server-side, so the charts have
 * history as soon as the page opens, and one sampler serves any number of open pages.
 */
export class DashboardSampler {
  readonly #executor: SqlExecutor;
  readonly #schemaName: string;
  readonly #schema: string;
  readonly #intervalMs: number;
  readonly #capacity: number;
  readonly #samples: DashboardSample[] = [];
  #lastAt: Date | null = null;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #lastError: string | undefined;

  constructor(options: {
    executor: SqlExecutor;
    schema: string;
    intervalMs: number;
    capacity?: number;
  }) {
    this.#executor = options.executor;
    this.#schemaName = options.schema;
    this.#schema = quoteIdentifier(options.schema);
    this.#intervalMs = options.intervalMs;
    this.#capacity = options.capacity ?? 720;
  }

  /** Takes one sample now (one at a time: a call during a sample waits for it). */
  sample(): Promise<void> {
    this.#running ??= this.#sampleOnce().finally(() => (this.#running = undefined));
    return this.#running;
  }

  /** Samples now and every `intervalMs`. */
  start(): void {
    if (this.#timer) return;
    void this.sample();
    this.#timer = setInterval(() => void this.sample(), this.#intervalMs);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }

  /** The samples, oldest first. */
  samples(): DashboardSample[] {
    return [...this.#samples];
  }

  /** The last sampling error, if the last sample failed. */
  lastError(): string | undefined {
    return this.#lastError;
  }

  async #sampleOnce(): Promise<void> {
    try {
      const [status, dispatched] = await Promise.all([
        readStatus(this.#executor, { schema: this.#schemaName, lastErrors: 1 }),
        this.#executor.query<{ at: Date | string; n: number }>(dispatchedSinceSql(this.#schema), [
          this.#lastAt,
        ]),
      ]);
      const row = dispatched.rows[0]!;
      const at = new Date(row.at);
      const seconds = this.#lastAt ? (at.getTime() - this.#lastAt.getTime()) / 1000 : 0;
      this.#samples.push({
        at: at.getTime(),
        backlog: status.backlog,
        deadLetters: status.deadLetters,
        publishedPerSecond: seconds > 0 ? Number(row.n) / seconds : null,
      });
      if (this.#samples.length > this.#capacity) this.#samples.shift();
      this.#lastAt = at;
      this.#lastError = undefined;
    } catch (error) {
      this.#lastError = error instanceof Error ? error.message : String(error);
    }
  }
}
