/** Retry delay policy. All durations in milliseconds. */
export interface BackoffOptions {
  /** Delay after the first failure. Default 30 000 (30 s). */
  baseMs: number;
  /** Upper bound of the exponential part. Default 900 000 (15 min). */
  maxMs: number;
  /** Uniform random extra delay in [0, jitterMs). Default 5 000. Spreads retries of a burst. */
  jitterMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 30_000, maxMs: 900_000, jitterMs: 5_000 };

/**
 * Delay before the next attempt after `attempts` attempts failed (attempts >= 1):
 * min(base * 2^(attempts-1), max) + jitter. `random` is injectable for tests.
 */
export function backoffDelayMs(
  attempts: number,
  options: BackoffOptions = DEFAULT_BACKOFF,
  random: () => number = Math.random,
): number {
  const exponent = Math.max(0, attempts - 1);
  // 2^exponent overflows to Infinity long before it matters; min() keeps it bounded.
  const exponential = Math.min(options.baseMs * 2 ** Math.min(exponent, 60), options.maxMs);
  return Math.round(exponential + random() * options.jitterMs);
}
