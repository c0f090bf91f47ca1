import type {
  OutgoingMessage,
  PublishOutcome,
  Publisher,
  PublisherMiddleware,
} from '../publisher.js';
import { safePublish } from '../safe-publish.js';

/** Callbacks of {@link metricsHooks}. Hooks that throw are ignored: metrics never fail a publish. */
export interface MetricsHooks {
  /** Once per message, after its call finished. `durationMs` is the whole call's duration. */
  onOutcome?: (message: OutgoingMessage, outcome: PublishOutcome, durationMs: number) => void;
  /** Once per call, after it finished. */
  onCall?: (
    messages: readonly OutgoingMessage[],
    outcomes: readonly PublishOutcome[],
    durationMs: number,
  ) => void;
}

/**
 * Reports every outcome and call duration to the given hooks (the metrics component attaches
 * counters and histograms here). Place it outermost to see what the dispatcher sees, including
 * fast-fails of a circuit breaker. A throwing inner publisher is reported as `retryable`
 * outcomes and the call returns them (the contract's meaning of a throw).
 */
export function metricsHooks(hooks: MetricsHooks): PublisherMiddleware {
  return (next: Publisher): Publisher => ({
    async publish(messages, options) {
      const started = performance.now();
      const outcomes = await safePublish(next, messages, options);
      const durationMs = performance.now() - started;
      messages.forEach((message, index) => {
        try {
          hooks.onOutcome?.(message, outcomes[index]!, durationMs);
        } catch {
          // See MetricsHooks: never fail a publish because of a metric.
        }
      });
      try {
        hooks.onCall?.(messages, outcomes, durationMs);
      } catch {
        // As above.
      }
      return outcomes;
    },
    messagingSystem: next.messagingSystem?.bind(next),
    // Keeps the wrapped publisher's promise: it delivers a call's run in order.
    ordersWithinCall: next.ordersWithinCall,
    close: next.close?.bind(next),
  });
}
