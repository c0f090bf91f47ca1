import { OutboxValidationError } from '../../core/errors.js';
import {
  DEFAULT_RECONNECT_DELAY,
  reconnectDelayMs,
  type ReconnectDelayOptions,
} from './reconnect-delay.js';

/**
 * Where a wake source's one connection (a LISTEN client, a replication stream) stands:
 *
 * - `created` — not started.
 * - `opening` — an attempt to open it is under way ({@link Reconnecting.opening}).
 * - `open`    — it works ({@link Reconnecting.opened}).
 * - `waiting` — it was lost or failed to open: a reopen is scheduled after the backoff
 *   ({@link Reconnecting.failed}); the dispatcher polls meanwhile.
 * - `stopped` — final ({@link Reconnecting.stop}); an attempt still under way gives up.
 *
 * created → opening → open | waiting; open → waiting; waiting → opening (the timer); any →
 * stopped. Nothing leaves `stopped`.
 */
export type ReconnectState = 'created' | 'opening' | 'open' | 'waiting' | 'stopped';

/**
 * The reconnect state machine wake sources share: the state, the count of failures in a row
 * that doubles the backoff (with jitter, reconnect-delay.ts), and the one reopen timer. The
 * source opens and drops its connection; it reports each step here.
 */
export class Reconnecting {
  readonly #reopen: () => void;
  readonly #delay: ReconnectDelayOptions;
  readonly #random: () => number;
  #state: ReconnectState = 'created';
  #failures = 0;
  #opens = 0;
  #timer: NodeJS.Timeout | undefined;

  /**
   * @param reopen called when a reopen timer fires: the source's next attempt.
   * @param delay the backoff's bounds, over {@link DEFAULT_RECONNECT_DELAY}.
   * @param random the jitter's source (tests pin it).
   */
  constructor(
    reopen: () => void,
    delay?: Partial<ReconnectDelayOptions>,
    random: () => number = Math.random,
  ) {
    this.#reopen = reopen;
    this.#delay = { ...DEFAULT_RECONNECT_DELAY, ...delay };
    this.#random = random;
  }

  get state(): ReconnectState {
    return this.#state;
  }

  /** An attempt to open begins (a no-op once stopped). */
  opening(): void {
    if (this.#state !== 'stopped') this.#state = 'opening';
  }

  /** The attempt succeeded: the backoff starts over. True when this is not the first open. */
  opened(): boolean {
    this.#state = 'open';
    this.#failures = 0;
    return this.#opens++ > 0;
  }

  /**
   * The connection was lost or the attempt failed: a reopen is scheduled. Returns its delay in
   * milliseconds, or undefined once stopped (nothing is scheduled then).
   */
  failed(): number | undefined {
    if (this.#state === 'stopped') return undefined;
    const retryInMs = reconnectDelayMs(this.#failures++, this.#delay, this.#random);
    this.#state = 'waiting';
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => this.#reopen(), retryInMs);
    this.#timer.unref();
    return retryInMs;
  }

  /** Final: a pending reopen is cancelled. */
  stop(): void {
    this.#state = 'stopped';
    clearTimeout(this.#timer);
  }
}

/** `value` (or `fallback` when absent), which must be a finite number > 0: a duration option. */
export function positiveMs(name: string, value: number | undefined, fallback: number): number {
  const v = value ?? fallback;
  if (!Number.isFinite(v) || v <= 0)
    throw new OutboxValidationError(name, `must be a number > 0, got ${String(v)}`);
  return v;
}
