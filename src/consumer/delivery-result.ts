/**
 * Why a delivery ended the way it did. Stable strings, meant for logs, metrics labels and tests.
 *
 * - `processed`: the handler ran and its effect was recorded.
 * - `duplicate`: the ledger already has this message as done for this consumer.
 * - `stale`: an ordered topic delivered a sequence at or below the consumer's position.
 * - `early`: strict ordering: an earlier sequence of the aggregate has not been processed yet.
 * - `claimed-elsewhere`: claim-first: another process holds a live claim on this message.
 * - `deferred`: the handler (or middleware such as the budget breaker) asked to try later.
 * - `handler-failed`: the handler threw; redeliver with backoff.
 * - `ledger-failed`: the database was unreachable or a ledger statement failed.
 * - `poison`: the body is not a valid envelope; retrying cannot help.
 * - `permanent-failure`: the handler threw a {@link PermanentError}.
 * - `max-attempts`: the handler kept failing and `maxAttempts` was reached.
 */
export type DeliveryReason =
  | 'processed'
  | 'duplicate'
  | 'stale'
  | 'early'
  | 'claimed-elsewhere'
  | 'deferred'
  | 'handler-failed'
  | 'ledger-failed'
  | 'poison'
  | 'permanent-failure'
  | 'max-attempts';

/**
 * What a broker binding must do with one delivery:
 * - `ack`: settle it; it will not come back (processed, duplicate or stale);
 * - `retry`: redeliver it, no earlier than `delayMs` from now when the broker can delay
 *   (NATS `nak(delay)`, HTTP `Retry-After`); never a silent drop;
 * - `dead`: it can never succeed; route it to the broker's dead-letter path and settle it.
 */
export interface DeliveryResult {
  action: 'ack' | 'retry' | 'dead';
  /** For `retry`: how long to wait before the next delivery, in milliseconds. */
  delayMs?: number;
  reason: DeliveryReason;
  /** Human-readable detail (error text, redacted), when there is one. */
  detail?: string;
  /** Message id, when the body could be parsed far enough to know it. */
  messageId?: string;
}

/** The result for an effect performed now or earlier: settle the delivery. */
export function ack(reason: DeliveryReason, messageId?: string, detail?: string): DeliveryResult {
  return {
    action: 'ack',
    reason,
    ...(messageId ? { messageId } : {}),
    ...(detail ? { detail } : {}),
  };
}

/** The result for a delivery to try again after `delayMs`. */
export function retry(
  reason: DeliveryReason,
  delayMs: number,
  messageId?: string,
  detail?: string,
): DeliveryResult {
  return {
    action: 'retry',
    delayMs: Math.max(0, Math.round(delayMs)),
    reason,
    ...(messageId ? { messageId } : {}),
    ...(detail ? { detail } : {}),
  };
}

/** The result for a delivery that belongs in the dead-letter path. */
export function dead(reason: DeliveryReason, messageId?: string, detail?: string): DeliveryResult {
  return {
    action: 'dead',
    reason,
    ...(messageId ? { messageId } : {}),
    ...(detail ? { detail } : {}),
  };
}
