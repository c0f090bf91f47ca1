/**
 * The subset of `kafkajs` (v2) the publisher calls, typed structurally so the core never imports
 * the SDK (STYLE.md, the Kysely rule). A real kafkajs `Producer` fits.
 */

/** One record as kafkajs takes it. */
export interface KafkaMessageLike {
  key: string;
  value: string;
  headers: Record<string, string>;
  /** Milliseconds since the epoch, as a decimal string. */
  timestamp: string;
}

/** kafkajs `Producer`, as far as the publisher uses it. */
export interface KafkaProducerLike {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  send(record: {
    topic: string;
    messages: KafkaMessageLike[];
    acks: number;
    timeout?: number;
  }): Promise<unknown>;
}

/** The module export used when the publisher creates the producer itself. */
export interface KafkaModuleLike {
  Kafka: new (config: {
    clientId: string;
    brokers: string[];
    connectionTimeout?: number;
    logLevel?: number;
    retry?: { retries: number };
  }) => {
    producer(config: {
      idempotent: boolean;
      maxInFlightRequests: number;
      retry?: { retries: number };
    }): KafkaProducerLike;
  };
}
