import { redactSecrets } from '../core/redact.js';
import { errorText, type PublishOutcome } from './publisher.js';

/** A `published` outcome (a fresh object: callers may attach data to outcomes). */
export function published(): PublishOutcome {
  return { status: 'published' };
}

/**
 * A `retryable` outcome whose error text is redacted: broker errors echo URLs, and outcome texts
 * end up in `last_error` and in logs (SPEC §6).
 */
export function retryable(error: unknown, retryAfterMs?: number): PublishOutcome {
  const outcome: PublishOutcome = { status: 'retryable', error: redactSecrets(errorText(error)) };
  if (retryAfterMs !== undefined && Number.isFinite(retryAfterMs) && retryAfterMs >= 0) {
    outcome.retryAfterMs = Math.ceil(retryAfterMs);
  }
  return outcome;
}

/** A `permanent` outcome whose error text is redacted (see {@link retryable}). */
export function permanent(error: unknown): PublishOutcome {
  return { status: 'permanent', error: redactSecrets(errorText(error)) };
}

/** The same retryable outcome for every message of a call (broker down, connection lost). */
export function allRetryable(count: number, error: unknown): PublishOutcome[] {
  const outcome = retryable(error);
  return Array.from({ length: count }, () => ({ ...outcome }));
}
