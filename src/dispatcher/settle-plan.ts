import { backoffDelayMs, type BackoffOptions } from '../core/backoff.js';
import { redactSecrets } from '../core/redact.js';
import type { OutgoingMessage, PublishOutcome } from '../publishers/publisher.js';
import type { Settlement } from './outbox-store.js';

/**
 * Decides each message's settlement from its publish outcome (pure, unit-tested):
 * published → published; permanent → dead at once; retryable → dead when attempts reached
 * `maxAttempts`, else retry after max(backoff(attempts), retryAfterMs).
 */
export function planSettlement(
  message: OutgoingMessage,
  outcome: PublishOutcome,
  policy: { maxAttempts: number; backoff: BackoffOptions; random?: () => number },
): Settlement {
  if (outcome.status === 'published') return { rowId: message.rowId, kind: 'published' };
  const error = redactSecrets(outcome.error || 'unknown publish error');
  if (outcome.status === 'permanent')
    return { rowId: message.rowId, kind: 'dead', error: `permanent: ${error}` };
  if (message.attempts >= policy.maxAttempts) {
    return {
      rowId: message.rowId,
      kind: 'dead',
      error: `gave up after ${message.attempts} attempts: ${error}`,
    };
  }
  const delayMs = Math.max(
    backoffDelayMs(message.attempts, policy.backoff, policy.random),
    outcome.retryAfterMs ?? 0,
  );
  return { rowId: message.rowId, kind: 'retry', error, delayMs };
}
