/**
 * `agent-outbox/publishers/http`: the webhook publisher. Uses the global `fetch`, no peer
 * dependency.
 * @packageDocumentation
 */
export {
  DEFAULT_HTTP_CONCURRENCY,
  DEFAULT_HTTP_TIMEOUT_MS,
  HttpPublisher,
  type FetchLike,
  type HttpPublisherOptions,
} from './http-publisher.js';
export { classifyStatus, parseRetryAfter } from './http-status.js';
