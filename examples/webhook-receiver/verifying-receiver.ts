/**
 * A minimal receiver for agent-outbox's signed webhooks that does NOT use agent-outbox: it checks
 * each request with the `standardwebhooks` package, exactly what a receiver in Python, Go, Ruby,
 * Java, PHP, Rust or C# does with that language's Standard Webhooks library. Try it:
 *
 * ```sh
 * export OUTBOX_WEBHOOK_SECRET="whsec_$(openssl rand -base64 32)"
 * npx tsx examples/webhook-receiver/verifying-receiver.ts            # listens on 127.0.0.1:8080
 * npx outbox dispatch --publisher http://127.0.0.1:8080/outbox       # same variable, signs
 * ```
 *
 * A receiver built with agent-outbox uses `createHttpReceiver(consumer, { signingSecrets })`
 * instead: the same verification, plus each effect recorded once in the consumer ledger.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { pathToFileURL } from 'node:url';
import { Webhook } from 'standardwebhooks';

/** A request that passed verification. */
export interface VerifiedWebhook {
  /** `webhook-id`: agent-outbox's message id, the same on every retry. */
  id: string;
  /** The parsed body: an agent-outbox envelope `{ id, topic, aggregateId, payload, … }`. */
  envelope: unknown;
}

/** Options of {@link createVerifyingReceiver}. */
export interface VerifyingReceiverOptions {
  /** The `whsec_…` secret shared with the sender. */
  secret: string;
  /** Performs the effect. Throwing answers 500, so the sender retries later. */
  onWebhook(webhook: VerifiedWebhook): void | Promise<void>;
  /** Told why a request was refused with 401 (forged, tampered, replayed, wrong secret). */
  onRefused?(reason: string): void;
}

/**
 * A `node:http` server answering 204 once a verified webhook was handled, 401 when verification
 * fails. A redelivery (same `webhook-id`) is answered 204 without running `onWebhook` again; a real
 * receiver keeps those ids in its database, for longer than the sender retries.
 */
export function createVerifyingReceiver(options: VerifyingReceiverOptions): Server {
  const webhook = new Webhook(options.secret);
  const handled = new Set<string>();
  return createServer((request, response) => {
    void readBody(request).then(async (body) => {
      let envelope: unknown;
      try {
        // The raw body as received: JSON parsed and serialised again would not verify.
        envelope = webhook.verify(body, request.headers as Record<string, string>);
      } catch (error) {
        options.onRefused?.((error as Error).message);
        response.writeHead(401, { 'content-type': 'text/plain' }).end('invalid signature');
        return;
      }
      const id = request.headers['webhook-id'] as string;
      try {
        if (!handled.has(id)) await options.onWebhook({ id, envelope });
        handled.add(id);
        response.writeHead(204).end();
      } catch {
        response.writeHead(500, { 'content-type': 'text/plain' }).end('try again later');
      }
    });
  });
}

async function readBody(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

// Run directly: listen on 127.0.0.1:8080 (PORT to change) and print what arrives.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const secret = process.env.OUTBOX_WEBHOOK_SECRET?.split(' ')[0];
  if (!secret) {
    console.error('set OUTBOX_WEBHOOK_SECRET to the whsec_ secret the dispatcher signs with');
    process.exit(2);
  }
  const port = Number(process.env.PORT ?? 8080);
  createVerifyingReceiver({
    secret,
    onWebhook: ({ id, envelope }) => console.log('verified', id, JSON.stringify(envelope)),
    onRefused: (reason) => console.warn('refused:', reason),
  }).listen(port, '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${port}/`));
}
