/**
 * `agent-outbox/cloudflare`: the outbox on Cloudflare Workers — a D1 writer, a dispatcher to
 * Queues (a Durable Object woken after each commit, and/or a Cron Trigger) and an idempotent,
 * order-restoring Queue consumer. Runs in workerd: no Node-only imports at runtime. See
 * docs/cloudflare.md.
 */
export { enqueue, type D1EnqueueOptions, type EnqueueStatements } from './enqueue.js';
export { migrateD1, d1MigrationScript, D1_MIGRATIONS, type D1Migration } from './migrations.js';
export {
  createScheduledDispatcher,
  type ScheduledDispatcher,
  type ScheduledDispatcherOptions,
  type DispatchRunSummary,
} from './scheduled-dispatcher.js';
export {
  OutboxDispatcherObject,
  wakeDispatcher,
  dispatcherStatus,
  type DispatcherObjectOptions,
  type DispatcherObjectStatus,
  type DurableObjectStateLike,
  type DurableObjectNamespaceLike,
} from './dispatcher-object.js';
export { D1OutboxStore } from './d1-outbox-store.js';
export {
  addD1UnorderedTopics,
  removeD1UnorderedTopics,
  listD1UnorderedTopics,
  repairD1Heads,
} from './chains.js';
export { CloudflareQueuesPublisher, QUEUES_LIMITS, type QueuesLimits } from './queues-publisher.js';
export {
  createQueueConsumer,
  type QueueConsumer,
  type QueueConsumerOptions,
  type D1Handler,
  type D1HandlerContext,
} from './queue-consumer.js';
export { traceHeaders, newTraceparent, isValidTraceparent } from './trace.js';
export type {
  D1Db,
  D1Statement,
  D1Result,
  QueueProducer,
  QueueSendRequest,
  QueueDelivery,
  QueueBatch,
} from './d1-types.js';
export { PermanentError, DeferError } from '../consumer/errors.js';
export type { DeliveryResult, DeliveryReason } from '../consumer/delivery-result.js';
export type { OrderingOptions, OrderCheck } from '../consumer/ordering.js';
export type { Envelope } from '../publishers/envelope.js';
export type { OutboxMessage } from '../core/message.js';
export { OutboxValidationError } from '../core/errors.js';
