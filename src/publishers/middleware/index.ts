/**
 * Publisher middleware: `timeout`, `circuitBreaker`, `metricsHooks`. Combine with
 * `withMiddleware(publisher, metricsHooks(…), circuitBreaker(), timeout(10_000))`.
 * @packageDocumentation
 */
export {
  circuitBreaker,
  type CircuitBreakerOptions,
  type CircuitState,
} from './circuit-breaker.js';
export { metricsHooks, type MetricsHooks } from './metrics-hooks.js';
export { timeout } from './timeout.js';
