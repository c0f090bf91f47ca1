/**
 * `agent-outbox/publishers/rabbitmq`: RabbitMQ publisher on a confirm channel. Peer dependency:
 * `amqplib`.
 * @packageDocumentation
 */
export {
  DEFAULT_AMQP_EXCHANGE,
  RabbitMqPublisher,
  type RabbitMqPublisherOptions,
} from './rabbitmq-publisher.js';
export type {
  AmqpConfirmChannelLike,
  AmqpConnectionLike,
  AmqpModuleLike,
  AmqpPublishOptions,
  AmqpReturnedMessageLike,
} from './amqp-client.js';
