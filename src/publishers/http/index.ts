/**
 * `agent-outbox/publishers/http`: the webhook publisher, with Standard Webhooks signing. Uses the
 * global `fetch` and node:crypto, no peer dependency.
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
export {
  DEFAULT_WEBHOOK_TOLERANCE_MS,
  parseWebhookSecret,
  signWebhook,
  verifyWebhook,
  WebhookSecretError,
  type WebhookSignatureHeaders,
  type WebhookVerification,
} from './standard-webhooks.js';
