import { EventEmitter } from 'node:events';
import { DeferError } from './errors.js';
import type { Handler, HandlerContext } from './handler.js';

/** Options of {@link createBudgetBreaker}. Give `maxSpend`, `maxCalls`, or both. */
export interface BudgetOptions {
  /** Length of one budget window, in ms (e.g. 60 000 for "per minute"). */
  windowMs: number;
  /**
   * Spend allowed per window, in whatever unit the handler reports (tokens, cents). Once the
   * reported total reaches it, messages are deferred until the window resets.
   */
  maxSpend?: number;
  /** Handler calls allowed per window (a rate limit). */
  maxCalls?: number;
  /** Clock, injectable for tests. Default `Date.now`. */
  now?: () => number;
}

/** Budget state, as carried by events and {@link BudgetBreaker.state}. */
export interface BudgetState {
  /** Start of the current window (epoch ms). */
  windowStart: number;
  /** When the current window ends and the budget resets (epoch ms). */
  resetAt: number;
  spent: number;
  calls: number;
  /** Why the breaker is open, or undefined while it is closed. */
  exceeded: 'spend' | 'calls' | undefined;
}

/** Events of a {@link BudgetBreaker}. */
export interface BudgetEventMap {
  /** The budget ran out: messages are deferred until `resetAt`. */
  'budget:exceeded': [BudgetState];
  /** A new window began after an exceeded one: messages flow again. */
  'budget:reset': [BudgetState];
}

/** Context added to a handler wrapped by {@link withBudget}. */
export interface BudgetContext {
  /** Reports what this call cost (tokens, cents, ...), e.g. from the API response's usage. */
  reportSpend(amount: number): void;
}

/**
 * A spend and rate budget per fixed window, shared by the handlers it wraps in this process.
 * Emits `budget:exceeded` and `budget:reset`. Spend is reported after a call, so concurrent calls
 * can overshoot the budget by what is in flight; bound concurrency in the binding if that
 * matters. For a budget shared by several processes, put the counter in Redis or Postgres and
 * throw `DeferError` yourself.
 */
export class BudgetBreaker extends EventEmitter<BudgetEventMap> {
  readonly #options: BudgetOptions;
  readonly #now: () => number;
  #state: BudgetState;
  #resetTimer: NodeJS.Timeout | undefined;

  constructor(options: BudgetOptions) {
    super();
    if (!(options.windowMs > 0)) throw new TypeError('BudgetBreaker: windowMs must be > 0');
    if (options.maxSpend === undefined && options.maxCalls === undefined)
      throw new TypeError('BudgetBreaker: give maxSpend, maxCalls or both');
    this.#options = options;
    this.#now = options.now ?? Date.now;
    const start = this.#now();
    this.#state = {
      windowStart: start,
      resetAt: start + options.windowMs,
      spent: 0,
      calls: 0,
      exceeded: undefined,
    };
  }

  /** A snapshot of the current window. */
  get state(): BudgetState {
    this.#roll();
    return { ...this.#state };
  }

  /**
   * Takes one call from the budget, or returns how long to wait (ms) when it is exhausted.
   * {@link withBudget} calls this before each handler call.
   */
  acquire(): { ok: true } | { ok: false; retryAfterMs: number } {
    this.#roll();
    if (this.#state.exceeded) return { ok: false, retryAfterMs: this.#state.resetAt - this.#now() };
    this.#state.calls += 1;
    // The call that reaches maxCalls is allowed; the next one waits.
    if (this.#options.maxCalls !== undefined && this.#state.calls >= this.#options.maxCalls)
      this.#open('calls');
    return { ok: true };
  }

  /** Adds spend to the current window. */
  reportSpend(amount: number): void {
    if (!Number.isFinite(amount) || amount < 0)
      throw new TypeError(`reportSpend: invalid amount ${amount}`);
    this.#roll();
    this.#state.spent += amount;
    if (this.#options.maxSpend !== undefined && this.#state.spent >= this.#options.maxSpend)
      this.#open('spend');
  }

  /** Stops the reset timer (the breaker keeps working, resets are then noticed lazily). */
  dispose(): void {
    clearTimeout(this.#resetTimer);
  }

  #open(reason: 'spend' | 'calls'): void {
    if (this.#state.exceeded) return;
    this.#state.exceeded = reason;
    this.emit('budget:exceeded', { ...this.#state });
    // Emit the reset on time even when no message arrives; unref'd so it never holds the process.
    clearTimeout(this.#resetTimer);
    this.#resetTimer = setTimeout(
      () => this.#roll(),
      Math.max(0, this.#state.resetAt - this.#now()),
    );
    this.#resetTimer.unref();
  }

  #roll(): void {
    const now = this.#now();
    if (now < this.#state.resetAt) return;
    const windows = Math.floor((now - this.#state.windowStart) / this.#options.windowMs);
    const windowStart = this.#state.windowStart + windows * this.#options.windowMs;
    const wasExceeded = this.#state.exceeded !== undefined;
    this.#state = {
      windowStart,
      resetAt: windowStart + this.#options.windowMs,
      spent: 0,
      calls: 0,
      exceeded: undefined,
    };
    if (wasExceeded) this.emit('budget:reset', { ...this.#state });
  }
}

/** Creates a {@link BudgetBreaker}. */
export function createBudgetBreaker(options: BudgetOptions): BudgetBreaker {
  return new BudgetBreaker(options);
}

/**
 * Wraps a handler that calls a paid API: when the budget is exhausted the message is deferred
 * (retried when the window resets) — never failed, never dropped. The handler reports its cost
 * through `context.reportSpend`.
 *
 * @example
 * ```ts
 * const budget = createBudgetBreaker({ windowMs: 60_000, maxSpend: 100_000, maxCalls: 50 });
 * budget.on('budget:exceeded', (s) => log.warn({ s }, 'LLM budget exhausted'));
 * const handler = withBudget(budget, async (message, { idempotencyKey, reportSpend }) => {
 *   const reply = await anthropic.messages.create({ ... });
 *   reportSpend(reply.usage.input_tokens + reply.usage.output_tokens);
 * });
 * ```
 */
export function withBudget<C extends HandlerContext>(
  breaker: BudgetBreaker,
  handler: Handler<C & BudgetContext>,
): Handler<C> {
  return async (message, context) => {
    const permit = breaker.acquire();
    if (!permit.ok) {
      throw new DeferError(`budget exceeded until the window resets`, permit.retryAfterMs);
    }
    await handler(message, {
      ...context,
      reportSpend: (amount: number) => breaker.reportSpend(amount),
    });
  };
}
