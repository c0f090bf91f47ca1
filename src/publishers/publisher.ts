import type { JsonValue } from '../core/message.js';

/**
 * A committed outbox message on its way to a broker: what a {@link Publisher} receives.
 * `id` is the globally unique message id — the same on every re-publish — so brokers and
 * consumers deduplicate on it (`Nats-Msg-Id`, `Idempotency-Key`, AMQP `messageId`, ...).
 */
export interface OutgoingMessage {
  /** Message id (UUID), stable across re-publishes. */
  id: string;
  /**
   * Outbox row id: a bigint as a decimal string on the claim engine, `lane:id` on the lanes
   * engine. Names the row, not the message (`id` does that): not for deduplication.
   */
  rowId: string;
  topic: string;
  aggregateId: string;
  /** Position within the aggregate in commit order, from 1. */
  sequence: number;
  /**
   * `false` when the message takes no part in its aggregate's order (written with
   * `ordered: false` or on a topic in `outbox_unordered_topics`). Absent means ordered.
   */
  ordered?: boolean;
  payload: JsonValue;
  headers: Record<string, string>;
  createdAt: Date;
  /** How many times publishing has been attempted, this one included. */
  attempts: number;
  /** Shadow message: the dispatcher settles it without publishing (never reaches a publisher). */
  shadow?: boolean;
}

/**
 * What happened to one message:
 * - `published`: the broker accepted it (durably, where the broker can say so);
 * - `retryable`: try again later (network error, timeout, 5xx, broker down); `retryAfterMs` is a
 *   hint from the broker (e.g. `Retry-After`) and the dispatcher waits at least that long;
 * - `permanent`: retrying cannot help (malformed, rejected by the receiver): dead-letter it now.
 */
export type PublishOutcome =
  | { status: 'published' }
  | { status: 'retryable'; error: string; retryAfterMs?: number }
  | { status: 'permanent'; error: string };

/** Per-call options of {@link Publisher.publish}. */
export interface PublishOptions {
  /** Aborts the call: unfinished messages come back `retryable`. */
  signal?: AbortSignal;
  /**
   * Where to send, overriding the adapter's topic-derived default: the NATS subject, AMQP
   * routing key, Redis stream key, SQS queue URL, Kafka topic or HTTP URL (resolved against the
   * configured one). Set by the `Router` for routes that name a destination. Adapters
   * without a notion of destination (in-memory) ignore it.
   */
  destination?: string;
}

/**
 * Sends messages to a broker. Returns exactly one outcome per message, in the same order — a
 * failure of one message must not be thrown for the whole batch (throwing is treated as
 * `retryable` for every message of the call).
 *
 * The dispatcher never passes two ordered messages of the same aggregate in one call (unless the
 * publisher declares {@link Publisher.ordersWithinCall}), so an implementation may publish a
 * call's messages concurrently. It sends an aggregate's run one call after another, the next only
 * once the previous message is `published`.
 */
export interface Publisher {
  publish(
    messages: readonly OutgoingMessage[],
    options?: PublishOptions,
  ): Promise<PublishOutcome[]>;
  /**
   * `true` when one call may carry several ordered messages of one aggregate: the publisher then
   * delivers them in the order given and stops at the first failure — every message after it in
   * the same aggregate is reported not `published` (a broker batch API that keeps order, such as
   * SQS FIFO with one group or a Kafka send to one partition). The dispatcher then passes a whole
   * run in one call instead of one call per message.
   */
  readonly ordersWithinCall?: boolean;
  /**
   * The broker `message` goes to, as OpenTelemetry's `messaging.system` (`nats`, `rabbitmq`,
   * `redis`, `kafka`, `aws_sqs`, `http`): named on the dispatcher's `send` span of the message.
   * A router answers per message; a publisher without it is reported as `unknown`.
   */
  messagingSystem?(message: OutgoingMessage): string;
  /** Releases connections. Called once, by whoever created the publisher. */
  close?(): Promise<void>;
}

/** Wraps a publisher to add behaviour (timeout, circuit breaker, metrics): `(next) => Publisher`. */
export type PublisherMiddleware = (next: Publisher) => Publisher;

/** Applies middleware so that the first in the list is the outermost. */
export function withMiddleware(
  publisher: Publisher,
  ...middleware: readonly PublisherMiddleware[]
): Publisher {
  return middleware.reduceRight((next, wrap) => wrap(next), publisher);
}

/** Turns an unknown thrown value into a one-line error text. */
export function errorText(error: unknown): string {
  if (error instanceof Error) return error.message || error.name;
  return String(error);
}
