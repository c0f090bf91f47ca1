import { importPeer } from '../optional-peer.js';
import { allRetryable, published, retryable } from '../outcomes.js';
import {
  errorText,
  type OutgoingMessage,
  type PublishOptions,
  type PublishOutcome,
  type Publisher,
} from '../publisher.js';
import type { KafkaModuleLike, KafkaProducerLike } from './kafka-client.js';
import { classifyKafkaError, toKafkaMessage } from './kafka-mapping.js';

/** Options of {@link KafkaPublisher}. */
export interface KafkaPublisherOptions {
  /**
   * Broker addresses (`['10.0.0.1:9092']`, or `kafka://h1:9092,h2:9092`) — the publisher creates
   * an idempotent kafkajs producer — or an existing `Producer` you created and connect/disconnect
   * yourself (create it with `idempotent: true` to keep the guarantee).
   */
  connection: string | string[] | KafkaProducerLike;
  /** Prepended to the outbox topic to form the Kafka topic. Default `''`. */
  topicPrefix?: string;
  /** Client id for the self-created client. Default `agent-outbox`. */
  clientId?: string;
  /** Broker acknowledgement timeout of each `send`. Default 30 000 ms. */
  ackTimeoutMs?: number;
  /** Connect timeout of the self-created client. Default 10 000 ms. */
  connectionTimeoutMs?: number;
  /** Loads `kafkajs` (tests; bundlers). Default: `import('kafkajs')`. */
  loadModule?: () => Promise<KafkaModuleLike>;
}

/**
 * Publishes to Kafka with an idempotent producer and `acks: -1` (all in-sync replicas), so
 * `published` means replicated. Record key = aggregate id (one partition per aggregate: order
 * per aggregate); value = envelope JSON; see {@link toKafkaMessage}. A call is split into one
 * `send` per Kafka topic; a failed `send` gives its messages the outcome of
 * {@link classifyKafkaError}. Kafka does not drop a re-publish after a dispatcher crash (the
 * idempotent producer only dedupes its own retries): consumers dedupe on the message id.
 *
 * Not tested against a Kafka broker (none runs here): the record mapping, error classification
 * and an unreachable broker are.
 */
export class KafkaPublisher implements Publisher {
  readonly #options: KafkaPublisherOptions;
  #producer: Promise<KafkaProducerLike> | undefined;

  constructor(options: KafkaPublisherOptions) {
    this.#options = options;
  }

  /** `kafka`: the `messaging.system` of this publisher's `send` spans. */
  messagingSystem(): string {
    return 'kafka';
  }

  async publish(
    messages: readonly OutgoingMessage[],
    options: PublishOptions = {},
  ): Promise<PublishOutcome[]> {
    if (messages.length === 0) return [];
    let producer: KafkaProducerLike;
    try {
      producer = await this.#connect();
    } catch (error) {
      // Whatever the error type, nothing was sent: a broker that comes back can take them all.
      return allRetryable(messages.length, `Kafka: ${errorText(error)}`);
    }
    const groups = new Map<string, number[]>();
    messages.forEach((message, index) => {
      const topic = options.destination ?? (this.#options.topicPrefix ?? '') + message.topic;
      groups.set(topic, [...(groups.get(topic) ?? []), index]);
    });
    const outcomes = new Array<PublishOutcome>(messages.length);
    await Promise.all(
      [...groups].map(async ([topic, indexes]) => {
        let outcome: PublishOutcome;
        if (options.signal?.aborted) {
          outcome = retryable('publish aborted');
        } else {
          try {
            await producer.send({
              topic,
              messages: indexes.map((i) => toKafkaMessage(messages[i]!)),
              acks: -1,
              timeout: this.#options.ackTimeoutMs ?? 30_000,
            });
            outcome = published();
          } catch (error) {
            outcome = classifyKafkaError(error);
          }
        }
        for (const i of indexes) outcomes[i] = { ...outcome };
      }),
    );
    return outcomes;
  }

  /** Disconnects the producer if the publisher created it. */
  async close(): Promise<void> {
    const producer = this.#producer;
    this.#producer = undefined;
    if (!producer || isProducer(this.#options.connection)) return;
    const opened = await producer.catch(() => undefined);
    await opened?.disconnect().catch(() => undefined);
  }

  #connect(): Promise<KafkaProducerLike> {
    if (isProducer(this.#options.connection)) return Promise.resolve(this.#options.connection);
    if (!this.#producer) {
      const producer = this.#open();
      this.#producer = producer;
      producer.catch(() => {
        if (this.#producer === producer) this.#producer = undefined;
      });
    }
    return this.#producer;
  }

  async #open(): Promise<KafkaProducerLike> {
    const load =
      this.#options.loadModule ??
      (() =>
        importPeer(
          'kafkajs',
          'KafkaPublisher',
          () => import('kafkajs'),
        ) as unknown as Promise<KafkaModuleLike>);
    const { Kafka } = await load();
    const kafka = new Kafka({
      clientId: this.#options.clientId ?? 'agent-outbox',
      brokers: brokerList(this.#options.connection as string | string[]),
      connectionTimeout: this.#options.connectionTimeoutMs ?? 10_000,
      // kafkajs logs every retry at ERROR; failures reach the dispatcher as outcomes instead.
      logLevel: 0,
      retry: { retries: 2 },
    });
    // Bounded retries: with kafkajs' default (infinite for idempotent producers) a dead broker
    // would hang `send` forever instead of handing the dispatcher a retryable outcome.
    const producer = kafka.producer({
      idempotent: true,
      maxInFlightRequests: 1,
      retry: { retries: 5 },
    });
    await producer.connect();
    return producer;
  }
}

function isProducer(value: KafkaPublisherOptions['connection']): value is KafkaProducerLike {
  return typeof (value as KafkaProducerLike).send === 'function';
}

/** `kafka://h1:9092,h2:9092` or a list → `['h1:9092', 'h2:9092']`. */
export function brokerList(connection: string | string[]): string[] {
  if (Array.isArray(connection)) return connection;
  return connection
    .replace(/^kafka:\/\//, '')
    .split(',')
    .map((broker) => broker.trim().replace(/\/.*$/, ''))
    .filter((broker) => broker.length > 0);
}
