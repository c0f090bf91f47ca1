/**
 * Prometheus metrics and the `/metrics` + `/healthz` server (SPEC §4.8). Needs the optional peer
 * dependency `prom-client`.
 * @packageDocumentation
 */
export {
  ATTEMPT_BUCKETS,
  createOutboxMetrics,
  LATENCY_BUCKETS_SECONDS,
  type OutboxHealth,
  type OutboxMetrics,
  type OutboxMetricsOptions,
} from './outbox-metrics.js';
export {
  startMetricsServer,
  type MetricsServer,
  type MetricsServerOptions,
} from './metrics-server.js';
export { OTHER_TOPIC, TopicLabels } from './topic-labels.js';
export {
  serveDispatcherMetrics,
  type ServeDispatcherMetricsOptions,
} from './serve-dispatcher-metrics.js';
export {
  createFleetMetrics,
  type FleetMetrics,
  type FleetMetricsOptions,
} from './fleet-metrics.js';
