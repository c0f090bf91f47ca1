import { retryable } from '../outcomes.js';
import type { PublishOutcome, Publisher, PublisherMiddleware } from '../publisher.js';
import { safePublish } from '../safe-publish.js';

/**
 * States: `closed` (calls pass) → after `failureThreshold` consecutive failed calls → `open`
 * (calls fail fast, the broker is not called) → after `cooldownMs` → `half-open` (ONE probe call
 * passes, concurrent calls still fail fast) → probe succeeds → `closed`, probe fails → `open`.
 */
export type CircuitState = 'closed' | 'open' | 'half-open';

/** Options of {@link circuitBreaker}. */
export interface CircuitBreakerOptions {
  /** Consecutive failed calls that open the circuit. Default 5. */
  failureThreshold?: number;
  /** How long the circuit stays open before a probe. Default 30 000 ms. */
  cooldownMs?: number;
  /** Called on every state change (for logs and metrics). */
  onStateChange?: (state: CircuitState) => void;
  /** Clock in ms (tests). Default `Date.now`. */
  now?: () => number;
}

/**
 * Turns a dead broker into fast `retryable` outcomes, so the dispatcher backs off instead of
 * waiting for a connect timeout per batch. A call counts as failed when nothing in it was
 * published and at least one message is `retryable` (or the call threw); `permanent` outcomes
 * are about the message, not the broker, and do not count. Any published message resets the
 * count. Fast-fail outcomes carry `retryAfterMs` = the time left until the next probe.
 *
 * Each call of `circuitBreaker(...)` makes one breaker; wrap each broker's publisher separately
 * (below a router, not above it) so one dead broker does not stop the others.
 */
export function circuitBreaker(options: CircuitBreakerOptions = {}): PublisherMiddleware {
  const failureThreshold = options.failureThreshold ?? 5;
  const cooldownMs = options.cooldownMs ?? 30_000;
  const now = options.now ?? Date.now;
  if (!(failureThreshold >= 1)) throw new RangeError('failureThreshold must be >= 1');
  if (!(cooldownMs >= 0)) throw new RangeError('cooldownMs must be >= 0');

  return (next: Publisher): Publisher => {
    let state: CircuitState = 'closed';
    let failures = 0;
    let openedAt = 0;
    let probing = false;
    const setState = (to: CircuitState): void => {
      if (state === to) return;
      state = to;
      try {
        options.onStateChange?.(to);
      } catch {
        // A logging hook must not change publishing.
      }
    };

    return {
      async publish(messages, publishOptions) {
        if (messages.length === 0) return [];
        if (state === 'open' && now() - openedAt >= cooldownMs) setState('half-open');
        if (state === 'open' || (state === 'half-open' && probing)) {
          const waitMs = Math.max(0, openedAt + cooldownMs - now());
          return messages.map(() =>
            retryable(
              `circuit open after ${failures} failed publish calls; broker not called`,
              waitMs,
            ),
          );
        }
        const probe = state === 'half-open';
        if (probe) probing = true;
        try {
          const outcomes = await safePublish(next, messages, publishOptions);
          if (callFailed(outcomes)) {
            failures++;
            if (probe || failures >= failureThreshold) {
              openedAt = now();
              setState('open');
            }
          } else {
            failures = 0;
            setState('closed');
          }
          return outcomes;
        } finally {
          if (probe) probing = false;
        }
      },
      messagingSystem: next.messagingSystem?.bind(next),
      // Keeps the wrapped publisher's promise: it delivers a call's run in order.
      ordersWithinCall: next.ordersWithinCall,
      close: next.close?.bind(next),
    };
  };
}

function callFailed(outcomes: readonly PublishOutcome[]): boolean {
  return (
    outcomes.every((outcome) => outcome.status !== 'published') &&
    outcomes.some((outcome) => outcome.status === 'retryable')
  );
}
