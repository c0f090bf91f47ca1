/** Any value JSON can represent. Payloads must be this (checked at runtime, see validate.ts). */
export type JsonValue =
  string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue | undefined };

/**
 * One side effect to perform later: what a tool writes instead of calling an external API.
 *
 * @example
 * ```ts
 * const message: OutboxMessage = {
 *   topic: 'payment.charge',
 *   aggregateId: `order:${orderId}`,
 *   payload: { orderId, amount: 1200, currency: 'JPY' },
 * };
 * ```
 */
export interface OutboxMessage {
  /** Routing name, e.g. `payment.charge`, `mail.send`. 1-255 characters. */
  topic: string;
  /**
   * The entity the effect belongs to (order id, user id). Messages of one aggregate on ordered
   * topics are published in commit order. 1-255 characters.
   */
  aggregateId: string;
  /** JSON-serialisable body, at most `maxPayloadBytes` (default 1 MiB) once serialised. */
  payload: JsonValue;
  /** String-to-string metadata carried to the consumer (trace context, tenant, ...). */
  headers?: Record<string, string>;
  /** Publish no earlier than this many milliseconds after commit time. Non-negative. */
  delayMs?: number;
  /** Publish no earlier than this instant. Mutually exclusive with `delayMs`. */
  availableAt?: Date;
  /** Version of the payload's shape, stored as the `schema_version` header. Default `"1"`. */
  schemaVersion?: string | number;
  /** Tenant the message belongs to, stored as the `tenant_id` header. */
  tenantId?: string;
  /**
   * Shadow mode: record and dispatch the message without publishing it (retrofit: compare the new
   * path's counts with the old path's). Default false.
   */
  shadow?: boolean;
  /**
   * Whether the message takes part in its aggregate's order. `false`: it may be published before
   * or alongside earlier messages of its aggregate, and later ones do not wait for it (mail,
   * analytics). Default: ordered, unless its topic matches a pattern in
   * `outbox_unordered_topics` (`addUnorderedTopics`). Decided once, when the message is
   * written, so every dispatcher agrees.
   */
  ordered?: boolean;
  /**
   * Hold the message for a person's decision: it is written (and committed with your
   * transaction) but never claimed until approved — `outbox approve`, `approveMessages()` or the
   * dashboard. Rejected or expired, it is kept and never published. Default false.
   */
  requiresApproval?: boolean;
  /**
   * With `requiresApproval`: how long the message may wait for a decision before it expires
   * (treated as rejected), in milliseconds from commit time. Default 7 days.
   */
  approvalExpiresInMs?: number;
  /**
   * With `requiresApproval`: who or what asked for the effect, shown to the person deciding
   * (`outbox approvals`). The agent helper fills in the tool call. 1-255 characters.
   */
  approvalRequestedBy?: string;
  /**
   * With `requiresApproval`: what happens when no one decides before the expiry. `'reject'`
   * (default): it expires, treated as rejected, never published. `'approve'`: the dispatcher
   * approves it at the deadline — for effects a person may stop but need not start. Either way
   * the decision is recorded as made by `expiry`.
   */
  approvalOnExpiry?: 'reject' | 'approve';
  /**
   * What the effect means, as a key (`'charge:order-42'`): while a message with the same key was
   * written within the dedupe window (the writer's `dedupeWindowMs`, default 30 days), this one
   * is not written and `enqueue` returns that first message (`deduped: true`). Remembered in
   * `outbox_dedupe_keys` for the whole window, even after retention removed the first message's
   * row. Unlike an idempotency key, which guards one request, it guards one effect however many
   * requests ask for it. 1-255 characters. Default: none (never deduplicated).
   */
  dedupeKey?: string;
}

/** Every field of {@link OutboxMessage}; anything else in a message is rejected (a typo). */
export const MESSAGE_FIELDS: readonly (keyof OutboxMessage)[] = [
  'topic',
  'aggregateId',
  'payload',
  'headers',
  'delayMs',
  'availableAt',
  'schemaVersion',
  'tenantId',
  'shadow',
  'ordered',
  'requiresApproval',
  'approvalExpiresInMs',
  'approvalRequestedBy',
  'approvalOnExpiry',
  'dedupeKey',
];

/** What `enqueue` returns for each message, in the order the messages were given. */
export interface EnqueuedMessage {
  /** Database row id (bigint as a decimal string: it can exceed 2^53). */
  id: string;
  /** Globally unique message id (UUID). Consumers and brokers deduplicate on it. */
  messageId: string;
  /** Position of this message within its aggregate, in commit order, starting at 1. */
  sequence: number;
  topic: string;
  aggregateId: string;
  /**
   * `true`: a message with the same `dedupeKey` was written within the dedupe window, so nothing
   * was written and every other field here is that first message's (its row id and sequence as
   * they were written: retention may have removed the row since). `false`: written by this call.
   */
  deduped: boolean;
  /** The message's `dedupeKey`, when it has one. */
  dedupeKey?: string;
  /** Present (true) when the message was written held: it waits for a person's approval. */
  awaitingApproval?: true;
  /**
   * The message id of the approval request written for this held message, when the writer was
   * created with `approvalRequests`.
   */
  approvalRequestId?: string;
}

/** Header names agent-outbox itself writes. */
export const HEADER = {
  traceparent: 'traceparent',
  tracestate: 'tracestate',
  schemaVersion: 'schema_version',
  tenantId: 'tenant_id',
} as const;
