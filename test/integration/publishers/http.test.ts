import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { HttpPublisher } from '../../../src/publishers/http/http-publisher.js';
import { createCollector, type Collector } from '../../contract/collector.js';
import { makeMessage } from '../../contract/messages.js';
import { describePublisherConformance } from '../../contract/publisher-conformance.js';
import { closedPort } from '../../helpers/services.js';
import { startTestWebhook, type ReceivedRequest, type TestWebhook } from './http-test-server.js';

// One receiver for the conformance suite: it routes each request to the collectors of its topic.
let conformanceHook: TestWebhook;
/** The conformance receiver refuses bodies above this with 413, as a proxy or gateway would. */
const HOOK_MAX_BODY_BYTES = 64 * 1024;
const collectorsByTopic = new Map<string, Collector>();

describePublisherConformance({
  name: 'HttpPublisher (local node:http webhook)',
  capabilities: {
    dedupesById: false,
    ordersPerAggregate: true,
    carriesNativeId: true,
    // One request per message: nothing caps a call.
    batchLimit: undefined,
    // The receiver's limit (413 above it), not the publisher's: HttpPublisher has none itself.
    maxMessageBytes: HOOK_MAX_BODY_BYTES,
    failingStatus: 'permanent',
    failingMessage: (message) => ({ ...message, headers: { ...message.headers, reject: 'yes' } }),
  },
  async setup() {
    conformanceHook = await startTestWebhook();
    conformanceHook.onRequest = (request, response) => {
      if (Buffer.byteLength(request.body) > HOOK_MAX_BODY_BYTES) {
        response.writeHead(413).end('payload too large');
        return;
      }
      const envelope = JSON.parse(request.body) as {
        topic: string;
        headers: Record<string, string>;
      };
      if (envelope.headers.reject) {
        response.writeHead(422).end('rejected');
        return;
      }
      collectorsByTopic.get(envelope.topic)?.push({
        body: request.body,
        nativeId: request.headers['idempotency-key'] as string,
      });
      response.writeHead(204).end();
    };
  },
  teardown: () => conformanceHook.close(),
  create: () => new HttpPublisher({ url: `${conformanceHook.baseUrl}/hook` }),
  createUnreachable: async () =>
    new HttpPublisher({ url: `http://127.0.0.1:${await closedPort()}/hook` }),
  collector: createCollector,
  throughProxy: {
    brokerPort: () => Number(new URL(conformanceHook.baseUrl).port),
    create: (port) => new HttpPublisher({ url: `http://127.0.0.1:${port}/hook` }),
  },
  async receive(topics, collector) {
    for (const topic of topics) collectorsByTopic.set(topic, collector);
    return async () => {
      for (const topic of topics) collectorsByTopic.delete(topic);
    };
  },
});

describe('HttpPublisher', () => {
  let hook: TestWebhook;

  beforeAll(async () => {
    hook = await startTestWebhook();
  });
  afterAll(() => hook.close());
  beforeEach(() => {
    hook.requests.length = 0;
    hook.onRequest = (_request, response) => response.writeHead(200).end();
  });

  it('POSTs the envelope as JSON with Idempotency-Key and Content-Type', async () => {
    const message = makeMessage();
    const publisher = new HttpPublisher({ url: `${hook.baseUrl}/outbox?x=1` });

    await publisher.publish([message]);

    const [request] = hook.requests as [ReceivedRequest];
    expect(request.method).toBe('POST');
    expect(request.url).toBe('/outbox?x=1');
    expect(request.headers['content-type']).toBe('application/json');
    expect(request.headers['idempotency-key']).toBe(message.id);
    expect(request.headers.traceparent).toBe(message.headers.traceparent);
    expect(JSON.parse(request.body)).toEqual({
      id: message.id,
      topic: message.topic,
      aggregateId: message.aggregateId,
      sequence: message.sequence,
      payload: message.payload,
      headers: message.headers,
      createdAt: message.createdAt.toISOString(),
    });
  });

  it('sends URL credentials as Basic auth and configured headers', async () => {
    const url = new URL(hook.baseUrl);
    url.username = 'hook';
    url.password = 's3cret';
    const publisher = new HttpPublisher({ url, headers: { 'X-Api-Key': 'k1' } });

    expect(await publisher.publish([makeMessage()])).toEqual([{ status: 'published' }]);

    expect(hook.requests[0]!.headers.authorization).toBe(`Basic ${btoa('hook:s3cret')}`);
    expect(hook.requests[0]!.headers['x-api-key']).toBe('k1');
  });

  const table: [number, 'published' | 'retryable' | 'permanent'][] = [
    [200, 'published'],
    [201, 'published'],
    [202, 'published'],
    [204, 'published'],
    [301, 'permanent'],
    [307, 'permanent'],
    [400, 'permanent'],
    [401, 'permanent'],
    [403, 'permanent'],
    [404, 'permanent'],
    [408, 'retryable'],
    [409, 'permanent'],
    [410, 'permanent'],
    [413, 'permanent'],
    [422, 'permanent'],
    [429, 'retryable'],
    [500, 'retryable'],
    [502, 'retryable'],
    [503, 'retryable'],
    [504, 'retryable'],
  ];
  it.each(table)('maps HTTP %i to %s', async (status, expected) => {
    hook.onRequest = (_request, response) =>
      response
        .writeHead(status, status >= 300 && status < 400 ? { location: '/elsewhere' } : {})
        .end('body');
    const publisher = new HttpPublisher({ url: hook.baseUrl });

    const [outcome] = await publisher.publish([makeMessage()]);

    expect(outcome!.status).toBe(expected);
    if (outcome!.status !== 'published') expect(outcome!.error).toContain(`HTTP ${status}`);
    // Redirects are not followed: exactly one request.
    expect(hook.requests).toHaveLength(1);
  });

  it('turns Retry-After seconds into retryAfterMs', async () => {
    hook.onRequest = (_request, response) =>
      response.writeHead(429, { 'retry-after': '120' }).end();
    const publisher = new HttpPublisher({ url: hook.baseUrl });

    expect(await publisher.publish([makeMessage()])).toEqual([
      { status: 'retryable', error: 'HTTP 429', retryAfterMs: 120_000 },
    ]);
  });

  it('turns a Retry-After HTTP date into retryAfterMs', async () => {
    const at = new Date(Date.now() + 3_600_000);
    hook.onRequest = (_request, response) =>
      response.writeHead(503, { 'retry-after': at.toUTCString() }).end();
    const publisher = new HttpPublisher({ url: hook.baseUrl });

    const [outcome] = await publisher.publish([makeMessage()]);

    expect(outcome!.status).toBe('retryable');
    const retryAfterMs = outcome!.status === 'retryable' ? outcome!.retryAfterMs : undefined;
    // Second resolution of HTTP dates: within an hour, and more than 59 minutes.
    expect(retryAfterMs).toBeGreaterThan(3_540_000);
    expect(retryAfterMs).toBeLessThanOrEqual(3_600_000);
  });

  it('redacts secrets that the receiver echoes in its error body', async () => {
    hook.onRequest = (_request, response) =>
      response
        .writeHead(500)
        .end('cannot reach postgres://app:hunter2@db.internal/x with token=abc123def');
    const publisher = new HttpPublisher({ url: hook.baseUrl });

    const [outcome] = await publisher.publish([makeMessage()]);

    expect(outcome!.status).toBe('retryable');
    const error = outcome!.status === 'retryable' ? outcome!.error : '';
    expect(error).toContain('HTTP 500');
    expect(error).not.toContain('hunter2');
    expect(error).not.toContain('abc123def');
  });

  it('gives retryable when the receiver does not answer within the timeout', async () => {
    hook.onRequest = () => undefined; // never answers; close() cuts the connection
    const publisher = new HttpPublisher({ url: hook.baseUrl, timeoutMs: 300 });

    const [outcome] = await publisher.publish([makeMessage()]);

    expect(outcome).toEqual({ status: 'retryable', error: 'no response within 300 ms' });
  });

  it('gives retryable with the cause of a network error', async () => {
    const publisher = new HttpPublisher({ url: `http://127.0.0.1:${await closedPort()}/` });

    const [outcome] = await publisher.publish([makeMessage()]);

    expect(outcome!.status).toBe('retryable');
    expect(outcome!.status === 'retryable' && outcome!.error).toContain('ECONNREFUSED');
  });

  it('keeps at most `concurrency` requests in flight', async () => {
    const total = 10;
    const limit = 3;
    let served = 0;
    let maxInFlight = 0;
    const held: (() => void)[] = [];
    // Answer one request only once min(limit, remaining) are in flight: a publisher with less
    // concurrency would stall (and fail by timeout), one with more would raise maxInFlight.
    hook.onRequest = (_request, response) => {
      held.push(() => response.writeHead(200).end());
      maxInFlight = Math.max(maxInFlight, held.length);
      while (held.length > 0 && held.length === Math.min(limit, total - served)) {
        served++;
        held.shift()!();
      }
    };
    const publisher = new HttpPublisher({ url: hook.baseUrl, concurrency: limit });
    const messages = Array.from({ length: total }, () => makeMessage());

    const outcomes = await publisher.publish(messages);

    expect(outcomes.every((o) => o.status === 'published')).toBe(true);
    expect(maxInFlight).toBe(limit);
  });

  it('resolves a route destination against the configured URL', async () => {
    const publisher = new HttpPublisher({ url: `${hook.baseUrl}/base/` });

    await publisher.publish([makeMessage()], { destination: 'payments' });

    expect(hook.requests[0]!.url).toBe('/base/payments');
  });

  it('rejects non-http URLs and bad options at construction', () => {
    expect(() => new HttpPublisher({ url: 'ftp://x/' })).toThrow(/http/);
    expect(() => new HttpPublisher({ url: 'http://x/', timeoutMs: 0 })).toThrow(RangeError);
    expect(() => new HttpPublisher({ url: 'http://x/', concurrency: 0 })).toThrow(RangeError);
  });
});
