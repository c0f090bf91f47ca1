import { allRetryable } from '../outcomes.js';
import type { PublishOptions, Publisher, PublisherMiddleware } from '../publisher.js';
import { safePublish } from '../safe-publish.js';

/**
 * Bounds how long one `publish` call may take. When `ms` pass without an answer, every message of
 * the call comes back `retryable` and the inner call is aborted through its `signal` (publishers
 * that honour it stop early; others finish in the background). The broker may still have taken
 * some of those messages: the dispatcher re-publishes them with the same id, which dedup (broker
 * or consumer) absorbs — at-least-once, never lost.
 */
export function timeout(ms: number): PublisherMiddleware {
  if (!(ms > 0) || !Number.isFinite(ms))
    throw new RangeError('timeout ms must be a positive number');
  return (next: Publisher): Publisher => ({
    async publish(messages, options: PublishOptions = {}) {
      if (messages.length === 0) return [];
      const controller = new AbortController();
      const signal = options.signal
        ? AbortSignal.any([options.signal, controller.signal])
        : controller.signal;
      let timer: NodeJS.Timeout | undefined;
      const expired = new Promise<'expired'>((resolve) => {
        timer = setTimeout(() => resolve('expired'), ms);
      });
      try {
        const result = await Promise.race([
          safePublish(next, messages, { ...options, signal }),
          expired,
        ]);
        if (result !== 'expired') return result;
        controller.abort(new Error(`publish timed out after ${ms} ms`));
        return allRetryable(messages.length, `publish did not answer within ${ms} ms`);
      } finally {
        clearTimeout(timer);
      }
    },
    messagingSystem: next.messagingSystem?.bind(next),
    // Keeps the wrapped publisher's promise: it delivers a call's run in order.
    ordersWithinCall: next.ordersWithinCall,
    close: next.close?.bind(next),
  });
}
