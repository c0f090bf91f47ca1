/**
 * `agent-outbox/publishers/kafka`: Kafka publisher (idempotent producer, acks = all). Peer
 * dependency: `kafkajs` (v2).
 * @packageDocumentation
 */
export { brokerList, KafkaPublisher, type KafkaPublisherOptions } from './kafka-publisher.js';
export { classifyKafkaError, KAFKA_MESSAGE_ID_HEADER, toKafkaMessage } from './kafka-mapping.js';
export type { KafkaMessageLike, KafkaModuleLike, KafkaProducerLike } from './kafka-client.js';
