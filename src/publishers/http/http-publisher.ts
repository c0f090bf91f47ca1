import { toEnvelope } from '../envelope.js';
import { mapWithConcurrency } from '../concurrency.js';
import { permanent, published, retryable } from '../outcomes.js';
import type { OutgoingMessage, PublishOptions, PublishOutcome, Publisher } from '../publisher.js';
import { brokerTraceHeaders } from '../trace-headers.js';
import { classifyStatus, parseRetryAfter } from './http-status.js';
import { parseWebhookSecrets, signWebhook, WEBHOOK_SECRET_PREFIX } from './standard-webhooks.js';

/** The part of the WHATWG `fetch` the publisher calls (global `fetch` fits). */
export type FetchLike = (
  url: string,
  init: {
    method: string;
    headers: Record<string, string>;
    body: string;
    signal: AbortSignal;
    redirect: 'manual';
  },
) => Promise<{
  status: number;
  headers: { get(name: string): string | null };
  text(): Promise<string>;
}>;

/** Options of {@link HttpPublisher}. */
export interface HttpPublisherOptions {
  /**
   * Webhook URL every message is POSTed to. Credentials in the URL (`https://user:pass@host/`)
   * are sent as HTTP Basic auth, because `fetch` refuses URLs that carry them.
   */
  url: string | URL;
  /** Per-request timeout; a request that takes longer is `retryable`. Default 10 000 ms. */
  timeoutMs?: number;
  /** How many requests of one `publish` call are in flight at once. Default 16. */
  concurrency?: number;
  /** Extra request headers, e.g. `{ Authorization: 'Bearer …' }`. They never reach error texts. */
  headers?: Record<string, string>;
  /** Replaces the global `fetch` (for a proxy-aware client, or tests). */
  fetch?: FetchLike;
  /**
   * Standard Webhooks secrets (`whsec_<base64>`, from your secret store, never from code): each
   * request then carries `webhook-id` (the message id), `webhook-timestamp` (Unix seconds of this
   * attempt) and `webhook-signature` (`v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`),
   * one signature per secret, space-separated — give the new and the old secret together while
   * rotating. Default: unsigned. A malformed or empty list throws here, at construction.
   *
   * @example
   * ```ts
   * new HttpPublisher({ url, signingSecrets: [process.env.WEBHOOK_SECRET!] });
   * ```
   */
  signingSecrets?: readonly string[];
}

/** Default per-request timeout of {@link HttpPublisher}. */
export const DEFAULT_HTTP_TIMEOUT_MS = 10_000;
/** Default number of concurrent requests per call of {@link HttpPublisher}. */
export const DEFAULT_HTTP_CONCURRENCY = 16;

/** How much of an error response body goes into the error text. */
const BODY_EXCERPT_LENGTH = 200;

/**
 * Publishes each message as one webhook call: `POST url` with the envelope as JSON body and the
 * message id as `Idempotency-Key`, so the receiver can deduplicate re-publishes; with
 * `signingSecrets`, signed per Standard Webhooks (see {@link HttpPublisherOptions.signingSecrets}).
 * Status mapping: see {@link classifyStatus}; timeouts and network errors are `retryable`;
 * `Retry-After` becomes `retryAfterMs`.
 *
 * @example
 * ```ts
 * const publisher = new HttpPublisher({
 *   url: 'https://hooks.example.com/outbox',
 *   timeoutMs: 5000,
 *   signingSecrets: [process.env.OUTBOX_WEBHOOK_SECRET!],
 * });
 * ```
 */
export class HttpPublisher implements Publisher {
  readonly #url: URL;
  readonly #timeoutMs: number;
  readonly #concurrency: number;
  readonly #headers: Record<string, string>;
  readonly #fetch: FetchLike;
  /** HMAC keys decoded from `signingSecrets`; empty = unsigned. */
  readonly #signingKeys: readonly Buffer[];
  /** The secrets as text (with and without `whsec_`), scrubbed from echoed error bodies. */
  readonly #secretTexts: readonly string[];

  constructor(options: HttpPublisherOptions) {
    const url = new URL(options.url);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new TypeError(`HttpPublisher needs an http(s) URL, got ${url.protocol}`);
    }
    const headers: Record<string, string> = {};
    if (url.username || url.password) {
      const user = decodeURIComponent(url.username);
      const password = decodeURIComponent(url.password);
      headers.authorization = `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
      url.username = '';
      url.password = '';
    }
    for (const [name, value] of Object.entries(options.headers ?? {})) {
      headers[name.toLowerCase()] = value;
    }
    this.#url = url;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_HTTP_TIMEOUT_MS;
    this.#concurrency = options.concurrency ?? DEFAULT_HTTP_CONCURRENCY;
    this.#headers = headers;
    this.#fetch = options.fetch ?? (fetch as unknown as FetchLike);
    const secrets = options.signingSecrets;
    this.#signingKeys = secrets === undefined ? [] : parseWebhookSecrets(secrets, 'signingSecrets');
    this.#secretTexts = (secrets ?? []).flatMap((secret) => [
      secret,
      // Without padding, so an echo that dropped the '=' is caught too.
      secret.slice(WEBHOOK_SECRET_PREFIX.length).replace(/=+$/, ''),
    ]);
    if (!(this.#timeoutMs > 0)) throw new RangeError('timeoutMs must be > 0');
    if (!(this.#concurrency >= 1)) throw new RangeError('concurrency must be >= 1');
  }

  /** `http`: the `messaging.system` of this publisher's `send` spans. */
  messagingSystem(): string {
    return 'http';
  }

  async publish(
    messages: readonly OutgoingMessage[],
    options: PublishOptions = {},
  ): Promise<PublishOutcome[]> {
    const url = options.destination ? new URL(options.destination, this.#url) : this.#url;
    return mapWithConcurrency(messages, this.#concurrency, (message) =>
      this.#send(url.toString(), message, options.signal),
    );
  }

  async #send(
    url: string,
    message: OutgoingMessage,
    signal?: AbortSignal,
  ): Promise<PublishOutcome> {
    if (signal?.aborted) return retryable('publish aborted before the request was sent');
    const headers: Record<string, string> = {
      ...this.#headers,
      'content-type': 'application/json',
      'idempotency-key': message.id,
    };
    // The trace context as HTTP headers too, so HTTP tracing on the receiver sees the trace.
    for (const [name, value] of Object.entries(brokerTraceHeaders(message))) {
      // A header value fetch would refuse must not turn the whole request into a network error.
      if (/^[\x20-\x7e]*$/.test(value)) headers[name] = value;
    }
    // Signed and sent as this one string: what the receiver verifies is byte for byte what it got.
    const body = JSON.stringify(toEnvelope(message));
    if (this.#signingKeys.length > 0) {
      // The time of this attempt, not of the message: a retry an hour later must not look replayed.
      const timestamp = Math.floor(Date.now() / 1000);
      headers['webhook-id'] = message.id;
      headers['webhook-timestamp'] = String(timestamp);
      headers['webhook-signature'] = signWebhook(this.#signingKeys, message.id, timestamp, body);
    }
    const timeout = AbortSignal.timeout(this.#timeoutMs);
    const combined = signal ? AbortSignal.any([signal, timeout]) : timeout;
    try {
      const response = await this.#fetch(url, {
        method: 'POST',
        headers,
        body,
        signal: combined,
        redirect: 'manual',
      });
      // Read the body in every case: an unread body keeps the connection from being reused.
      const answer = await response.text().catch(() => '');
      const kind = classifyStatus(response.status);
      if (kind === 'published') return published();
      const error = `HTTP ${response.status}${excerpt(this.#scrubSecrets(answer))}`;
      if (kind === 'permanent') return permanent(error);
      return retryable(error, parseRetryAfter(response.headers.get('retry-after')));
    } catch (error) {
      if (timeout.aborted) return retryable(`no response within ${this.#timeoutMs} ms`);
      if (signal?.aborted) return retryable('publish aborted');
      return retryable(networkErrorText(error));
    }
  }

  /**
   * A receiver that echoes its configuration (a debug page, a misconfigured proxy) must not put
   * our secret into `last_error`: exact matches are removed here, before the generic redaction.
   */
  #scrubSecrets(text: string): string {
    let result = text;
    for (const secret of this.#secretTexts) result = result.split(secret).join('[REDACTED]');
    return result;
  }

  /** Nothing to release: `fetch` pools connections globally. */
  async close(): Promise<void> {}
}

function excerpt(body: string): string {
  const text = body.replace(/\s+/g, ' ').trim();
  if (!text) return '';
  return `: ${text.length > BODY_EXCERPT_LENGTH ? `${text.slice(0, BODY_EXCERPT_LENGTH)}…` : text}`;
}

/** `fetch` says only "fetch failed"; the useful part (ECONNREFUSED, DNS) is in `cause`. */
function networkErrorText(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const cause = (error as { cause?: unknown } | null)?.cause;
  if (cause instanceof Error && cause.message && cause.message !== message) {
    return `${message}: ${cause.message}`;
  }
  return message;
}
