import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Consumer } from '../create-consumer.js';
import type { DeliveryResult } from '../delivery-result.js';
import { parseEnvelope } from '../../publishers/envelope.js';

/** Options of {@link createHttpReceiver}. */
export interface HttpReceiverOptions {
  /** Largest accepted body, in bytes; larger ones get 413 (poison). Default 2 MiB. */
  maxBodyBytes?: number;
  /** Called with every result, e.g. for logging. */
  onResult?: (result: DeliveryResult) => void;
}

/**
 * A `node:http` request handler for webhook deliveries (the HTTP publisher's wire format: POST,
 * body = envelope JSON, `Idempotency-Key` = message id). The status is sent only after the
 * consumer returned, so a 2xx always means "effect recorded":
 *
 * - 200: processed, or a duplicate/stale delivery of a recorded one;
 * - 4xx: poison — 400 malformed or id mismatch, 405 not POST, 413 too large, 422 rejected by the
 *   handler (`PermanentError`): the sender must dead-letter, not retry;
 * - 503 + `Retry-After` (seconds): retry later (handler failure, deferral, database down).
 *
 * @example
 * ```ts
 * http.createServer(createHttpReceiver(consumer)).listen(8080, '127.0.0.1');
 * ```
 */
export function createHttpReceiver(
  consumer: Consumer,
  options: HttpReceiverOptions = {},
): (request: IncomingMessage, response: ServerResponse) => void {
  const maxBodyBytes = options.maxBodyBytes ?? 2 * 1024 * 1024;

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
      const body = Buffer.concat(chunks).toString('utf8');
      const key = request.headers['idempotency-key'];
      // A key that disagrees with the body means a broken sender: refuse before any effect.
      const id = envelopeId(body);
      if (typeof key === 'string' && id !== undefined && key !== id) {
        finish(response, {
          action: 'dead',
          reason: 'poison',
          messageId: id,
          detail: 'Idempotency-Key does not match envelope id',
        });
        return;
      }
      consumer.handle(body).then(
        (result) => finish(response, result),
        () => reply(response, 500, { error: 'receiver failure' }),
      );
    });
  };
}

/** The envelope's id, or undefined when the body is not a valid envelope (handle() says why). */
function envelopeId(body: string): string | undefined {
  try {
    return parseEnvelope(body).id;
  } catch {
    return undefined;
  }
}
