import { errorText } from '../publishers/publisher.js';
import { redactSecrets } from '../core/redact.js';

/**
 * Throw from a handler when retrying can never succeed (the payload is invalid for this
 * consumer, the external API rejected the request for good). The delivery goes to the dead-letter
 * path instead of being retried. Any other error is retried.
 *
 * @example
 * ```ts
 * if (typeof payload.amount !== 'number') throw new PermanentError('amount is missing');
 * ```
 */
export class PermanentError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PermanentError';
  }
}

/**
 * Throw from a handler (or middleware) to put a message back for later WITHOUT it counting as a
 * failure: a rate limit, an exhausted budget, a dependency in maintenance. The delivery is
 * retried after `delayMs`; in claim-first mode the claim is released, in transactional mode the
 * transaction rolls back.
 */
export class DeferError extends Error {
  /** Minimum wait before the next delivery, in milliseconds. */
  readonly delayMs: number;

  constructor(message: string, delayMs: number) {
    super(message);
    this.name = 'DeferError';
    this.delayMs = delayMs;
  }
}

/** One-line, secret-free text of a thrown value, for `DeliveryResult.detail` and logs. */
export function safeErrorText(error: unknown): string {
  return redactSecrets(errorText(error), 500);
}
