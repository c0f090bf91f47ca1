/** Latency percentiles in milliseconds, rounded to 0.01 ms. */
export interface Percentiles {
  p50: number;
  p95: number;
  p99: number;
}

export function percentiles(samples: readonly number[]): Percentiles {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => {
    if (sorted.length === 0) return NaN;
    const index = Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1);
    return Math.round(sorted[Math.max(0, index)]! * 100) / 100;
  };
  return { p50: at(0.5), p95: at(0.95), p99: at(0.99) };
}

/** The median (the lower middle for an even count). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)]!;
}

/** Per percentile, the median over several runs' percentiles. */
export function medianPercentiles(runs: readonly Percentiles[]): Percentiles {
  return {
    p50: median(runs.map((r) => r.p50)),
    p95: median(runs.map((r) => r.p95)),
    p99: median(runs.map((r) => r.p99)),
  };
}

export const round = (value: number, digits = 2) => Math.round(value * 10 ** digits) / 10 ** digits;

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `fn` and returns its wall time in milliseconds. */
export async function timed(fn: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await fn();
  return performance.now() - started;
}

export function log(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}
