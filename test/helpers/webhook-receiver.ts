import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { PublishEvent } from './history.js';
import { parseEnvelope, type Envelope } from '../../src/publishers/envelope.js';

/** A real HTTP endpoint that records every delivery with its time window, for the history checker. */
export interface WebhookReceiver {
  url: string;
  events: PublishEvent[];
  envelopes: Envelope[];
  /** Distinct message ids received. */
  distinct(): number;
  close(): Promise<void>;
}

export interface ReceiverOptions {
  /** Milliseconds to hold each request before answering (widens race windows). */
  holdMs?: (envelope: Envelope) => number;
  /** Status to answer (default 200). */
  status?: (envelope: Envelope) => number;
}

async function body(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

export async function startWebhookReceiver(
  options: ReceiverOptions = {},
): Promise<WebhookReceiver> {
  const events: PublishEvent[] = [];
  const envelopes: Envelope[] = [];
  const ids = new Set<string>();
  let requestNumber = 0;
  const server: Server = createServer((request, response) => {
    const start = performance.now();
    const who = `request-${++requestNumber}`;
    void body(request).then(async (text) => {
      const envelope = parseEnvelope(text);
      if (request.headers['idempotency-key'] !== envelope.id)
        throw new Error('Idempotency-Key header does not match the envelope id');
      const hold = options.holdMs?.(envelope) ?? 0;
      let aborted = false;
      response.on('close', () => {
        if (!response.writableFinished) aborted = true;
      });
      if (hold > 0) await new Promise((resolve) => setTimeout(resolve, hold));
      const status = options.status?.(envelope) ?? 200;
      if (status >= 200 && status < 300) {
        events.push({
          messageId: envelope.id,
          publisher: who,
          start,
          end: performance.now(),
          via: request.url ?? '',
        });
        envelopes.push(envelope);
        ids.add(envelope.id);
      }
      if (!aborted) response.writeHead(status, { 'content-type': 'application/json' }).end('{}');
    });
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    events,
    envelopes,
    distinct: () => ids.size,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
