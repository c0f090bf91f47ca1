/** Bounds of the reconnect backoff, in milliseconds. */
export interface ReconnectDelayOptions {
  /** First delay after a lost connection. Default 100. */
  minMs: number;
  /** Cap of the doubling delay. Default 10 000. */
  maxMs: number;
}

/** Defaults of {@link ReconnectDelayOptions}. */
export const DEFAULT_RECONNECT_DELAY: ReconnectDelayOptions = { minMs: 100, maxMs: 10_000 };

/**
 * Delay before reconnect attempt number `failures` (0-based): doubling from `minMs`, capped at
 * `maxMs`, then scaled by a random factor in [0.5, 1) so a fleet of dispatchers that lost the
 * same server does not reconnect in lock-step when it comes back.
 */
export function reconnectDelayMs(
  failures: number,
  options: ReconnectDelayOptions = DEFAULT_RECONNECT_DELAY,
  random: () => number = Math.random,
): number {
  const doubled = options.minMs * 2 ** Math.min(failures, 20);
  return Math.min(options.maxMs, doubled) * (0.5 + random() / 2);
}
