import type { JsonValue } from '../core/message.js';
import type { OutgoingMessage } from './publisher.js';

/**
 * The wire format every publisher sends as the message body (JSON), and every consumer binding
 * parses: the HTTP webhook body, the NATS/RabbitMQ/SQS/Kafka/Queues message body, the Redis
 * stream entry's `envelope` field. One format means one parser on the consumer side and one
 * place to version it. Broker-native id fields (Nats-Msg-Id, AMQP messageId, Idempotency-Key,
 * SQS MessageDeduplicationId) carry `id` in addition.
 */
export interface Envelope {
  id: string;
  topic: string;
  aggregateId: string;
  sequence: number;
  payload: JsonValue;
  headers: Record<string, string>;
  /** ISO-8601 timestamp of the outbox row's creation. */
  createdAt: string;
}

export function toEnvelope(message: OutgoingMessage): Envelope {
  return {
    id: message.id,
    topic: message.topic,
    aggregateId: message.aggregateId,
    sequence: message.sequence,
    payload: message.payload,
    headers: message.headers,
    createdAt: message.createdAt.toISOString(),
  };
}

/** Thrown by {@link parseEnvelope}: the delivery is poison and belongs in the dead-letter path. */
export class EnvelopeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EnvelopeError';
  }
}

/**
 * Parses and checks a received body. Throws {@link EnvelopeError} (never returns a half-valid
 * value) so a consumer can route malformed deliveries to its dead-letter path instead of crashing.
 */
export function parseEnvelope(body: string | Uint8Array): Envelope {
  const text = typeof body === 'string' ? body : new TextDecoder().decode(body);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new EnvelopeError(`body is not JSON (${text.length} characters)`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new EnvelopeError('body is not a JSON object');
  const v = value as Record<string, unknown>;
  for (const key of ['id', 'topic', 'aggregateId', 'createdAt'] as const) {
    if (typeof v[key] !== 'string' || (v[key] as string).length === 0)
      throw new EnvelopeError(`envelope.${key} must be a non-empty string`);
  }
  if (typeof v.sequence !== 'number' || !Number.isInteger(v.sequence) || v.sequence < 1) {
    throw new EnvelopeError('envelope.sequence must be a positive integer');
  }
  if (!('payload' in v)) throw new EnvelopeError('envelope.payload is missing');
  const headers = v.headers ?? {};
  if (
    typeof headers !== 'object' ||
    headers === null ||
    Array.isArray(headers) ||
    Object.values(headers).some((h) => typeof h !== 'string')
  ) {
    throw new EnvelopeError('envelope.headers must be an object of strings');
  }
  return {
    id: v.id as string,
    topic: v.topic as string,
    aggregateId: v.aggregateId as string,
    sequence: v.sequence,
    payload: v.payload as JsonValue,
    headers: headers as Record<string, string>,
    createdAt: v.createdAt as string,
  };
}
