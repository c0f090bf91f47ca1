import { readStatus } from '../admin/status.js';
import { quoteIdentifier } from '../core/identifier.js';
import { chartHistorySql, dispatchedSinceSql } from '../sql/dashboard.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { Periodic } from './periodic.js';

/** One point of the dashboard's time series. */
export interface DashboardSample {
  /** Server time of the sample, ms since the epoch. */
  at: number;
  backlog: number;
  deadLetters: number;
  /** Messages dispatched per second since the previous sample (null for the first sample). */
  publishedPerSecond: number | null;
  /**
   * Lanes engine only: the rate is partly estimated (a cursor moved past the sample's window of
   * ids, or a lane has more parked rows than a sample counts). See docs/operations.md, "Dashboard".
   */
  publishedEstimated?: boolean;
}

/** What the server needs of a sampler (one per engine). */
export interface DashboardSeries {
  /** Takes one sample now (one at a time: a call during a sample waits for it). */
  sample(): Promise<void>;
  /** Samples now and every interval. */
  start(): void;
  stop(): Promise<void>;
  /** The samples, oldest first. */
  samples(): DashboardSample[];
  /** The last sampling error, if any. */
  lastError(): string | undefined;
}

/** Most dispatched rows the start-up history reads (see `chartHistorySql`). */
export const HISTORY_MAX_DISPATCHED_ROWS = 100_000;

/**
 * Samples backlog, dead letters and the published rate every `intervalMs`, keeping the last
 * `capacity` samples in memory (default 720: an hour at 5 s). Server-side, so one sampler serves
 * any number of open pages. Before its first sample it rebuilds the charts' span (capacity ×
 * interval) from the database, so the charts are not empty when `outbox ui` has just started.
 */
export class DashboardSampler implements DashboardSeries {
  readonly #executor: SqlExecutor;
  readonly #schemaName: string;
  readonly #schema: string;
  readonly #intervalMs: number;
  readonly #capacity: number;
  readonly #samples: DashboardSample[] = [];
  /** Where the next sample's window starts: the server's timestamp as text (microseconds). */
  #lastAt: string | null = null;
  /** The same instant in ms since the epoch (the rate's interval). */
  #lastMs = 0;
  readonly #periodic: Periodic;
  #lastError: string | undefined;
  #historyLoaded = false;
  #historyError: string | undefined;

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
    this.#periodic = new Periodic(() => this.#sampleOnce(), options.intervalMs);
    this.#capacity = options.capacity ?? 720;
  }

  /** Takes one sample now (one at a time: a call during a sample waits for it). */
  sample(): Promise<void> {
    return this.#periodic.run();
  }

  /** Samples now and every `intervalMs`. */
  start(): void {
    this.#periodic.start();
  }

  stop(): Promise<void> {
    return this.#periodic.stop();
  }

  /** The samples, oldest first. */
  samples(): DashboardSample[] {
    return [...this.#samples];
  }

  /** The last sampling error, if the last sample failed, else the start-up history's error. */
  lastError(): string | undefined {
    return this.#lastError ?? this.#historyError;
  }

  /** The points before the first sample, from the rows' own timestamps (once; best effort). */
  async #loadHistory(): Promise<void> {
    this.#historyLoaded = true;
    const { rows } = await this.#executor.query<{
      at: number;
      until: string;
      backlog: number;
      deadLetters: number;
      dispatched: number;
    }>(chartHistorySql(this.#schema), [
      this.#capacity * this.#intervalMs,
      HISTORY_MAX_DISPATCHED_ROWS,
      this.#intervalMs,
    ]);
    // The newest point is now(); the first live sample then takes the next one.
    for (const [i, row] of rows.slice(-this.#capacity).entries())
      this.#samples.push({
        at: Number(row.at),
        backlog: Number(row.backlog),
        deadLetters: Number(row.deadLetters),
        publishedPerSecond: i === 0 ? null : Number(row.dispatched) / (this.#intervalMs / 1000),
      });
    const last = rows.at(-1);
    if (last) {
      this.#lastAt = last.until;
      this.#lastMs = Number(last.at);
    }
  }

  async #sampleOnce(): Promise<void> {
    if (!this.#historyLoaded)
      try {
        await this.#loadHistory();
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        this.#historyError = `reading the charts' history failed: ${message}`;
      }
    try {
      const [status, dispatched] = await Promise.all([
        readStatus(this.#executor, { schema: this.#schemaName, lastErrors: 1, engine: 'claims' }),
        this.#executor.query<{ at: Date | string; cursor: string; n: number }>(
          dispatchedSinceSql(this.#schema),
          [this.#lastAt],
        ),
      ]);
      const row = dispatched.rows[0]!;
      const at = new Date(row.at);
      const seconds = this.#lastAt ? (at.getTime() - this.#lastMs) / 1000 : 0;
      this.#samples.push({
        at: at.getTime(),
        backlog: status.backlog,
        deadLetters: status.deadLetters,
        publishedPerSecond: seconds > 0 ? Number(row.n) / seconds : null,
      });
      if (this.#samples.length > this.#capacity) this.#samples.shift();
      this.#lastAt = row.cursor;
      this.#lastMs = at.getTime();
      this.#lastError = undefined;
    } catch (error) {
      this.#lastError = error instanceof Error ? error.message : String(error);
    }
  }
}
