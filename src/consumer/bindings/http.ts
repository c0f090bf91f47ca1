import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Consumer } from '../create-consumer.js';
import type { DeliveryResult } from '../delivery-result.js';
import { parseEnvelope } from '../../publishers/envelope.js';
import {
  DEFAULT_WEBHOOK_TOLERANCE_MS,
  parseWebhookSecrets,
  verifyWebhook,
} from '../../publishers/http/standard-webhooks.js';

/** Options of {@link createHttpReceiver}. */
export interface HttpReceiverOptions {
  /** Largest accepted body, in bytes; larger ones get 413 (poison). Default 2 MiB. */
  maxBodyBytes?: number;
  /** Called with every result, e.g. for logging. */
  onResult?: (result: DeliveryResult) => void;
  /**
   * Standard Webhooks secrets (`whsec_<base64>`) this receiver accepts signatures from; give the
   * new and the old one together while rotating. With them, a request without a valid
   * `webhook-signature` under at least one of them, or whose `webhook-timestamp` is more than
   * {@link timestampToleranceMs} from now, gets 401 and its effect is not performed. Without
   * them (the default) every well-formed envelope is performed, from whoever sends it: then the
   * receiver must not be reachable by anyone but the dispatcher. Malformed secrets throw here.
   */
  signingSecrets?: readonly string[];
  /**
   * How far `webhook-timestamp` may be from this machine's clock, either way, before a signed
   * request is refused as a replay. Only with `signingSecrets`. Default 300 000 (5 minutes, the
   * spec's default).
   */
  timestampToleranceMs?: number;
  /**
   * Called for every request refused with 401, with why (for logging or alerting: someone is
   * sending unsigned or forged requests, or a secret or a clock is wrong). Never given a secret.
   */
  onUnauthorized?: (reason: string) => void;
}

/**
 * A `node:http` request handler for webhook deliveries (the HTTP publisher's wire format: POST,
 * body = envelope JSON, `Idempotency-Key` and/or `webhook-id` = message id; with
 * `signingSecrets`, Standard Webhooks signatures required). The status is sent only after the
 * consumer returned, so a 2xx always means "effect recorded":
 *
 * - 200: processed, or a duplicate/stale delivery of a recorded one;
 * - 401: signing secrets are set and the signature or timestamp is missing or wrong; nothing
 *   performed, nothing recorded in the ledger;
 * - 4xx: poison — 400 malformed or id mismatch, 405 not POST, 413 too large, 422 rejected by the
 *   handler (`PermanentError`): the sender must dead-letter, not retry;
 * - 503 + `Retry-After` (seconds): retry later (handler failure, deferral, database down).
 *
 * @example
 * ```ts
 * const secrets = process.env.OUTBOX_WEBHOOK_SECRET!.split(' ');
 * http.createServer(createHttpReceiver(consumer, { signingSecrets: secrets })).listen(8080);
 * ```
 */
export function createHttpReceiver(
  consumer: Consumer,
  options: HttpReceiverOptions = {},
): (request: IncomingMessage, response: ServerResponse) => void {
  const maxBodyBytes = options.maxBodyBytes ?? 2 * 1024 * 1024;
  // Decoded once, so a malformed secret fails at start-up and not on the first request.
  const signingKeys =
    options.signingSecrets === undefined
      ? undefined
      : parseWebhookSecrets(options.signingSecrets, 'signingSecrets');
  const toleranceMs = options.timestampToleranceMs ?? DEFAULT_WEBHOOK_TOLERANCE_MS;
  if (!(toleranceMs > 0)) throw new RangeError('timestampToleranceMs must be > 0');

  const reply = (response: ServerResponse, status: number, body: object, headers = {}) => {
    response.writeHead(status, { 'content-type': 'application/json', ...headers });
    response.end(JSON.stringify(body));
  };

  const finish = (response: ServerResponse, result: DeliveryResult) => {
    options.onResult?.(result);
    const body = { action: result.action, reason: result.reason, messageId: result.messageId };
    if (result.action === 'ack') return reply(response, 200, body);
    if (result.action === 'dead')
      return reply(response, result.reason === 'poison' ? 400 : 422, body);
    const seconds = Math.max(1, Math.ceil((result.delayMs ?? 0) / 1000));
    return reply(response, 503, body, { 'retry-after': String(seconds) });
  };

  return (request, response) => {
    if (request.method !== 'POST') {
      reply(response, 405, { error: 'POST an envelope' }, { allow: 'POST' });
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    request.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBodyBytes) tooLarge = true;
      else if (!tooLarge) chunks.push(chunk);
    });
    request.on('error', () => response.destroy());
    request.on('end', () => {
      if (tooLarge) {
        reply(response, 413, { error: `body over ${maxBodyBytes} bytes` });
        return;
      }
      const bytes = Buffer.concat(chunks);
      if (signingKeys) {
        // Verified over the raw bytes, before parsing: nothing of an unsigned body is acted on.
        const verification = verifyWebhook(
          signingKeys,
          {
            id: header(request, 'webhook-id'),
            timestamp: header(request, 'webhook-timestamp'),
            signature: header(request, 'webhook-signature'),
          },
          bytes,
          toleranceMs,
        );
        if (!verification.ok) {
          options.onUnauthorized?.(verification.reason);
          reply(response, 401, { error: 'unauthorized', reason: verification.reason });
          return;
        }
      }
      const body = bytes.toString('utf8');
      // An id header that disagrees with the body means a broken sender: refuse before any effect.
      const id = envelopeId(body);
      for (const name of ['Idempotency-Key', 'webhook-id']) {
        const key = header(request, name.toLowerCase());
        if (key !== undefined && id !== undefined && key !== id) {
          finish(response, {
            action: 'dead',
            reason: 'poison',
            messageId: id,
            detail: `${name} does not match envelope id`,
          });
          return;
        }
      }
      consumer.handle(body, { messagingSystem: 'http' }).then(
        (result) => finish(response, result),
        () => reply(response, 500, { error: 'receiver failure' }),
      );
    });
  };
}

/** A single-valued request header, or undefined when absent. */
function header(request: IncomingMessage, name: string): string | undefined {
  const value = request.headers[name];
  return typeof value === 'string' ? value : undefined;
}

/** The envelope's id, or undefined when the body is not a valid envelope (handle() says why). */
function envelopeId(body: string): string | undefined {
  try {
    return parseEnvelope(body).id;
  } catch {
    return undefined;
  }
}
