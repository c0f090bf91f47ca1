import type { NatsUncoveredSubject } from './nats/nats-jetstream-publisher.js';
import type { Publisher } from './publisher.js';

/** Options of {@link createPublisherFromUrl}; each applies to one scheme only. */
export interface PublisherFromUrlOptions {
  /**
   * `nats://`: the JetStream stream to publish into (CLI `--nats-stream OUTBOX`): used as it is
   * if it exists (never changed; a subject it does not capture is `permanent`), created if not.
   */
  natsStream?: string;
  /**
   * `nats://`: subjects to create a missing `natsStream` with (CLI `--nats-subjects`); default
   * `[natsSubjectPrefix + '>']`, or, without a prefix, the topics' first segments.
   */
  natsStreamSubjects?: string[];
  /** `nats://`: called once per subject `natsStream` does not capture (to log it). */
  natsOnUncoveredSubject?: (event: NatsUncoveredSubject) => void;
  /** `nats://`: subject prefix. Default `''`. */
  natsSubjectPrefix?: string;
  /** `amqp(s)://`: exchange. Default `outbox`. */
  amqpExchange?: string;
  /** `redis(s)://`: key prefix. Default `outbox:`. */
  redisKeyPrefix?: string;
  /** `kafka://`: topic prefix. Default `''`. */
  kafkaTopicPrefix?: string;
  /** `http(s)://`: request timeout. Default 10 000 ms. */
  httpTimeoutMs?: number;
  /** `http(s)://`: extra request headers (e.g. Authorization). */
  httpHeaders?: Record<string, string>;
  /** `http(s)://`: Standard Webhooks `whsec_` secrets to sign with (see `HttpPublisher`). */
  httpSigningSecrets?: readonly string[];
}

/** URL schemes {@link createPublisherFromUrl} understands. */
export const PUBLISHER_URL_SCHEMES = [
  'http',
  'https',
  'nats',
  'amqp',
  'amqps',
  'redis',
  'rediss',
  'kafka',
  'memory',
] as const;

/**
 * Builds a publisher from a URL — what `outbox dispatch --publisher URL` calls:
 * `http(s)://…` → HttpPublisher, `nats://…` → NatsJetStreamPublisher, `amqp(s)://…` →
 * RabbitMqPublisher, `redis(s)://…` → RedisStreamsPublisher, `kafka://h1:9092,h2:9092` →
 * KafkaPublisher, `memory://` → InMemoryPublisher. Adapters are loaded with dynamic imports, so
 * only the chosen broker's client library has to be installed. Nothing connects here: the first
 * `publish` does, and an unreachable broker gives `retryable` outcomes, not a throw.
 *
 * @example
 * ```ts
 * const publisher = await createPublisherFromUrl('nats://127.0.0.1:4222', { natsStream: 'OUTBOX' });
 * ```
 */
export async function createPublisherFromUrl(
  url: string,
  options: PublisherFromUrlOptions = {},
): Promise<Publisher> {
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  switch (scheme) {
    case 'http':
    case 'https': {
      const { HttpPublisher } = await import('./http/http-publisher.js');
      return new HttpPublisher({
        url,
        ...(options.httpTimeoutMs !== undefined && { timeoutMs: options.httpTimeoutMs }),
        ...(options.httpHeaders && { headers: options.httpHeaders }),
        ...(options.httpSigningSecrets && { signingSecrets: options.httpSigningSecrets }),
      });
    }
    case 'nats': {
      const { NatsJetStreamPublisher } = await import('./nats/nats-jetstream-publisher.js');
      return new NatsJetStreamPublisher({
        connection: url,
        ...(options.natsSubjectPrefix !== undefined && {
          subjectPrefix: options.natsSubjectPrefix,
        }),
        ...(options.natsStream !== undefined && {
          stream: {
            name: options.natsStream,
            ...(options.natsStreamSubjects && { subjects: options.natsStreamSubjects }),
            ...(options.natsOnUncoveredSubject && {
              onUncoveredSubject: options.natsOnUncoveredSubject,
            }),
          },
        }),
      });
    }
    case 'amqp':
    case 'amqps': {
      const { RabbitMqPublisher } = await import('./rabbitmq/rabbitmq-publisher.js');
      return new RabbitMqPublisher({
        connection: url,
        ...(options.amqpExchange !== undefined && { exchange: options.amqpExchange }),
      });
    }
    case 'redis':
    case 'rediss': {
      const { RedisStreamsPublisher } = await import('./redis/redis-streams-publisher.js');
      return new RedisStreamsPublisher({
        connection: url,
        ...(options.redisKeyPrefix !== undefined && { keyPrefix: options.redisKeyPrefix }),
      });
    }
    case 'kafka': {
      const { KafkaPublisher } = await import('./kafka/kafka-publisher.js');
      return new KafkaPublisher({
        connection: url,
        ...(options.kafkaTopicPrefix !== undefined && { topicPrefix: options.kafkaTopicPrefix }),
      });
    }
    case 'memory': {
      const { InMemoryPublisher } = await import('./memory/in-memory-publisher.js');
      return new InMemoryPublisher();
    }
    default:
      throw new TypeError(
        `unsupported publisher URL scheme "${scheme ?? url}": use one of ${PUBLISHER_URL_SCHEMES.map((s) => `${s}://`).join(', ')}`,
      );
  }
}
