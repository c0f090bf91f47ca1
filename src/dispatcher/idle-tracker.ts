/**
 * Whether a dispatcher is idle, for `onIdle()`: nothing in flight (a claim, a settle, a deferred
 * settle's retries) and the latest claim found nothing due.
 */
export class IdleTracker {
  #inFlight = 0;
  #lastClaimEmpty = true;
  #waiters: (() => void)[] = [];
  readonly #onIdle: () => void;

  /** `onIdle` runs each time the dispatcher becomes idle, before the waiters resolve. */
  constructor(onIdle: () => void) {
    this.#onIdle = onIdle;
  }

  /** A claim, settle or deferred settle starts. */
  begin(): void {
    this.#inFlight++;
  }

  /** One started with {@link begin} is done: tells the waiters if that made the dispatcher idle. */
  end(): void {
    this.#inFlight--;
    this.#notify();
  }

  /**
   * What the latest claim found. An empty claim while a settle is in flight proves nothing (that
   * settle may make an ordered successor due): the caller passes false then.
   */
  noteClaim(foundNothing: boolean): void {
    this.#lastClaimEmpty = foundNothing;
  }

  get idle(): boolean {
    return this.#inFlight === 0 && this.#lastClaimEmpty;
  }

  /** Resolves when idle; at once when that already holds. */
  whenIdle(): Promise<void> {
    if (this.idle) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  #notify(): void {
    if (!this.idle) return;
    this.#onIdle();
    const waiters = this.#waiters;
    this.#waiters = [];
    waiters.forEach((resolve) => resolve());
  }
}
