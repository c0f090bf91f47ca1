/**
 * `agent-outbox/publishers`: building blocks shared by every broker — the router, middleware,
 * `createPublisherFromUrl`, outcome helpers for custom publishers, and the HTTP webhook publisher
 * (no client library needed). Broker adapters live in their own subpaths
 * (`agent-outbox/publishers/nats`, `…/rabbitmq`, `…/redis`, `…/sqs`, `…/kafka`) so that
 * importing this module never loads a broker SDK.
 * @packageDocumentation
 */
export { mapWithConcurrency } from './concurrency.js';
export {
  createPublisherFromUrl,
  PUBLISHER_URL_SCHEMES,
  type PublisherFromUrlOptions,
} from './from-url.js';
export {
  DEFAULT_HTTP_CONCURRENCY,
  DEFAULT_HTTP_TIMEOUT_MS,
  HttpPublisher,
  type FetchLike,
  type HttpPublisherOptions,
} from './http/http-publisher.js';
export { classifyStatus, parseRetryAfter } from './http/http-status.js';
export {
  circuitBreaker,
  metricsHooks,
  timeout,
  type CircuitBreakerOptions,
  type CircuitState,
  type MetricsHooks,
} from './middleware/index.js';
export { importPeer, MissingPeerDependencyError } from './optional-peer.js';
export {
  createPublisherFromConfig,
  loadPublisherConfig,
  parsePublisherConfig,
  PublisherConfigError,
  type PublisherConfig,
} from './publisher-config.js';
export { allRetryable, permanent, published, retryable } from './outcomes.js';
export type { PublishOptions } from './publisher.js';
export { Router, type Route, type RouterOptions } from './router.js';
export { safePublish } from './safe-publish.js';
export { compileTopicPattern, type TopicMatcher } from './topic-pattern.js';
