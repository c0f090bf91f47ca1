/**
 * `agent-outbox/publishers/nats`: NATS JetStream publisher. Peer dependency: `nats` (v2).
 * @packageDocumentation
 */
export {
  DEFAULT_NATS_STREAM,
  NatsJetStreamPublisher,
  type NatsJetStreamPublisherOptions,
  type NatsStreamReport,
  type NatsUncoveredSubject,
} from './nats-jetstream-publisher.js';
export type {
  NatsConnectionLike,
  NatsJetStreamLike,
  NatsJetStreamManagerLike,
  NatsModuleLike,
  NatsPubAckLike,
} from './nats-client.js';
