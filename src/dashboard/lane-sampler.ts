import { quoteIdentifier } from '../core/identifier.js';
import { readLaneEngineStatus } from '../lanes/lane-engine-status.js';
import { LANE_COUNT } from '../migrations/024-lanes.js';
import { laneSampleSql } from '../sql/dashboard-lanes.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import type { DashboardSample, DashboardSeries } from './sampler.js';
import { LATENCY_EDGES_SECONDS } from './state.js';
import { Periodic } from './periodic.js';

/**
 * Ids past a lane's previous cursor that one sample counts before it estimates the rest from
 * their density (the lanes share one id sequence: about this many messages in all).
 */
export const LANE_SAMPLE_ID_WINDOW = 10_000;

/**
 * Parked rows a sample counts: the ids a lane's parked rows (not dead) may span, the dead rows
 * it walks past, and the dead letters in all. Past it the parked rows that went out are not
 * counted and the sample says it is estimated.
 */
export const LANE_SAMPLE_PARKED_LIMIT = 1_000;

/** How long a sample's latency counts stay in the histogram (the claim engine's last hour). */
const LATENCY_SPAN_MS = 3_600_000;

interface LaneRow {
  lane: number;
  cursor: string;
  at: number;
  passed: number;
  parkedPassed: number;
  buckets: Record<string, number> | null;
  parkedBuckets: Record<string, number> | null;
  parkedBehind: number | null;
  deadLetters: number;
}

/** The latency histogram of the lanes engine: counts per bucket, an upper bound (see docs). */
export interface LaneLatency {
  edgesSeconds: number[];
  counts: number[];
  total: number;
}

/**
 * The dashboard's sampler on the lanes engine: backlog and dead letters from
 * `readLaneEngineStatus` (bounded by a window of ids), the published rate and the latency from
 * the lane cursors (sql/dashboard-lanes.ts `laneSampleSql`): what a cursor passed since the
 * previous sample, less the growth of the parked rows and dead letters. Each sample reads at most a
 * window of ids past each lane's previous cursor and about {@link LANE_SAMPLE_PARKED_LIMIT} parked
 * rows a lane, whatever the backlog or the history. The charts start empty: there is no per-message
 * timestamp to rebuild them from.
 */
export class LaneDashboardSampler implements DashboardSeries {
  readonly #executor: SqlExecutor;
  readonly #schemaName: string;
  readonly #schema: string;
  readonly #capacity: number;
  readonly #idWindow: number;
  readonly #parkedLimit: number;
  readonly #samples: DashboardSample[] = [];
  /** Each lane's cursor as of the previous sample. */
  readonly #lanes = new Map<number, { cursor: string }>();
  /**
   * Parked rows not dead at or below the cursors, plus the dead letters, at the previous sample
   * (null when not counted: past the parked limit).
   */
  #parked: number | null = null;
  /** What a sample counted below zero, taken off the next ones. */
  #carried = 0;
  /** Latency counts of each sample, oldest first, for the last hour. */
  readonly #latency: { at: number; counts: number[] }[] = [];
  #lastMs = 0;
  readonly #periodic: Periodic;
  #lastError: string | undefined;

  constructor(options: {
    executor: SqlExecutor;
    schema: string;
    intervalMs: number;
    capacity?: number;
    idWindow?: number;
    parkedLimit?: number;
  }) {
    this.#executor = options.executor;
    this.#schemaName = options.schema;
    this.#schema = quoteIdentifier(options.schema);
    this.#periodic = new Periodic(() => this.#sampleOnce(), options.intervalMs);
    this.#capacity = options.capacity ?? 720;
    this.#idWindow = options.idWindow ?? LANE_SAMPLE_ID_WINDOW;
    this.#parkedLimit = options.parkedLimit ?? LANE_SAMPLE_PARKED_LIMIT;
  }

  sample(): Promise<void> {
    return this.#periodic.run();
  }

  start(): void {
    this.#periodic.start();
  }

  stop(): Promise<void> {
    return this.#periodic.stop();
  }

  samples(): DashboardSample[] {
    return [...this.#samples];
  }

  lastError(): string | undefined {
    return this.#lastError;
  }

  /** The latency histogram of the messages the cursors passed in the last hour. */
  latency(now = Date.now()): LaneLatency {
    const counts = LATENCY_EDGES_SECONDS.map(() => 0);
    for (const sample of this.#latency)
      if (sample.at >= now - LATENCY_SPAN_MS) sample.counts.forEach((n, i) => (counts[i]! += n));
    return {
      edgesSeconds: LATENCY_EDGES_SECONDS,
      counts,
      total: counts.reduce((a, b) => a + b, 0),
    };
  }

  async #sampleOnce(): Promise<void> {
    try {
      // Sequential: the executor may be one client (a pooler's connection).
      const status = await readLaneEngineStatus(this.#executor, {
        schema: this.#schemaName,
        lastErrors: 0,
      });
      const known = [...this.#lanes.entries()];
      const { rows } = await this.#executor.query<LaneRow>(laneSampleSql(this.#schema), [
        known.map(([lane]) => lane),
        known.map(([, l]) => l.cursor),
        this.#idWindow,
        this.#parkedLimit,
        LANE_COUNT,
        LATENCY_EDGES_SECONDS,
      ]);
      const at = Number(rows[0]?.at ?? Date.now());
      const counted = this.#count(rows);
      const seconds = this.#lastMs > 0 ? (at - this.#lastMs) / 1000 : 0;
      this.#samples.push({
        at,
        backlog: status.backlog,
        deadLetters: status.deadLetters,
        publishedPerSecond: seconds > 0 && counted ? counted.published / seconds : null,
        ...(counted?.estimated && { publishedEstimated: true }),
      });
      if (this.#samples.length > this.#capacity) this.#samples.shift();
      if (counted) this.#latency.push({ at, counts: counted.latency });
      while (this.#latency[0] && this.#latency[0].at < at - LATENCY_SPAN_MS) this.#latency.shift();
      this.#lastMs = at;
      this.#lastError = undefined;
    } catch (error) {
      this.#lastError = error instanceof Error ? error.message : String(error);
    }
  }

  /**
   * What the lanes published since the previous sample (undefined on the first), and the latency
   * counts of what the cursors passed; remembers each lane's cursor and the parked rows.
   */
  #count(
    rows: LaneRow[],
  ): { published: number; estimated: boolean; latency: number[] } | undefined {
    const first = this.#lanes.size === 0;
    // Parked rows not dead at or below the cursors, and dead letters: null when not counted.
    let parked: number | null = 0;
    const dead = Number(rows[0]?.deadLetters ?? 0);
    let passed = 0;
    let passedNotParked = 0;
    let estimated = false;
    const latency = LATENCY_EDGES_SECONDS.map(() => 0);
    for (const row of rows) {
      const lane = Number(row.lane);
      const before = this.#lanes.get(lane);
      this.#lanes.set(lane, { cursor: row.cursor });
      parked = parked === null || row.parkedBehind === null ? null : parked + row.parkedBehind;
      if (!before) continue;
      const moved = BigInt(row.cursor) - BigInt(before.cursor);
      // A cursor never goes back; one that did (the schema was made again) starts over.
      if (moved < 0n) continue;
      const scale = moved > BigInt(this.#idWindow) ? Number(moved) / this.#idWindow : 1;
      if (scale > 1) estimated = true;
      passed += Number(row.passed) * scale;
      passedNotParked += (Number(row.passed) - Number(row.parkedPassed)) * scale;
      for (const [bucket, n] of Object.entries(row.buckets ?? {}))
        latency[Math.min(Number(bucket), latency.length) - 1]! += Number(n);
      for (const [bucket, n] of Object.entries(row.parkedBuckets ?? {}))
        latency[Math.min(Number(bucket), latency.length) - 1]! -= Number(n);
    }
    const parkedNow = parked !== null && dead <= this.#parkedLimit ? parked + dead : null;
    const parkedBefore = this.#parked;
    this.#parked = parkedNow;
    if (first) return undefined;
    // A parked row leaves only when it is published (a dead letter stays; a replay keeps the
    // row): what the cursors passed, less what the parked rows grew by, is what went out.
    const known = parkedNow !== null && parkedBefore !== null;
    if (!known) estimated = true;
    // A sample can come out below zero (a dead letter above its cursor is counted before the
    // cursor passes it): it is carried into the next ones, so the sum over samples stays exact.
    const published =
      (known ? passed - (parkedNow - parkedBefore) : passedNotParked) + this.#carried;
    this.#carried = Math.min(0, published);
    return { published: Math.max(0, Math.round(published)), estimated, latency };
  }
}
