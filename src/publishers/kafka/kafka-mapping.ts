import { toEnvelope } from '../envelope.js';
import { permanent, retryable } from '../outcomes.js';
import type { OutgoingMessage, PublishOutcome } from '../publisher.js';
import type { KafkaMessageLike } from './kafka-client.js';

/** Kafka header carrying the message id, for consumers that read headers only. */
export const KAFKA_MESSAGE_ID_HEADER = 'message-id';

/**
 * One outbox message as a Kafka record: key = aggregate id, so all messages of an aggregate land
 * on one partition and keep their order; value = envelope JSON; headers = message headers plus
 * `message-id`; timestamp = the outbox row's creation time.
 */
export function toKafkaMessage(message: OutgoingMessage): KafkaMessageLike {
  return {
    key: message.aggregateId,
    value: JSON.stringify(toEnvelope(message)),
    headers: { ...message.headers, [KAFKA_MESSAGE_ID_HEADER]: message.id },
    timestamp: String(message.createdAt.getTime()),
  };
}

/** Broker error types that reject the records themselves: sending them again cannot succeed. */
const PERMANENT_TYPES = new Set([
  'MESSAGE_TOO_LARGE',
  'RECORD_LIST_TOO_LARGE',
  'INVALID_RECORD',
  'INVALID_TOPIC_EXCEPTION',
  'CORRUPT_MESSAGE',
]);

/**
 * A kafkajs error → outcome. Record-level rejections are `permanent`; everything else —
 * connection errors, timeouts, leader elections, exhausted retries, authorization (an operator can
 * fix it) — is `retryable`. kafkajs wraps the broker error as `cause` after retries, so both
 * levels are looked at.
 */
export function classifyKafkaError(error: unknown): PublishOutcome {
  const text = `Kafka: ${describe(error)}`;
  for (let e: unknown = error, depth = 0; e && depth < 5; depth++) {
    const type = (e as { type?: unknown }).type;
    if (typeof type === 'string' && PERMANENT_TYPES.has(type)) return permanent(text);
    e = (e as { cause?: unknown }).cause;
  }
  return retryable(text);
}

function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = (error as { cause?: unknown }).cause;
  const suffix =
    cause instanceof Error && cause.message !== error.message ? ` (${cause.message})` : '';
  return `${error.name !== 'Error' ? `${error.name}: ` : ''}${error.message}${suffix}`;
}
