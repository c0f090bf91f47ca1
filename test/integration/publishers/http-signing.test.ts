import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { toEnvelope } from '../../../src/publishers/envelope.js';
import { HttpPublisher } from '../../../src/publishers/http/http-publisher.js';
import { WebhookSecretError } from '../../../src/publishers/http/standard-webhooks.js';
import { createCollector, type Collector } from '../../contract/collector.js';
import { makeMessage } from '../../contract/messages.js';
import { describePublisherConformance } from '../../contract/publisher-conformance.js';
import { closedPort } from '../../helpers/services.js';
import { startTestWebhook, type ReceivedRequest, type TestWebhook } from './http-test-server.js';

// The independent implementation is the `standardwebhooks` package (the spec's reference library):
// every check below is its `verify`, never our own code.
const secretOf = (bytes = 32) => `whsec_${randomBytes(bytes).toString('base64')}`;
const headersOf = (request: ReceivedRequest) => request.headers as Record<string, string>;

/** Non-ASCII text of several kinds: the body is UTF-8, signed and sent as the same bytes. */
const AWKWARD_TEXT = 'grüße ✓ 日本語 עברית 🎉👩‍👩‍👧 e\u0301 \u2028\u2029 "quoted" \\ \ud800';

// Rotation: the publisher signs with both; each receiver below knows only one of them.
const CURRENT = secretOf();
const PREVIOUS = secretOf(24);
const verifiers = [new Webhook(CURRENT), new Webhook(PREVIOUS)];
let conformanceHook: TestWebhook;
const HOOK_MAX_BODY_BYTES = 64 * 1024;
const collectorsByTopic = new Map<string, Collector>();
let verifiedRequests = 0;
const refused: string[] = [];

describePublisherConformance({
  name: 'HttpPublisher signed with two secrets, every request verified by standardwebhooks',
  capabilities: {
    dedupesById: false,
    ordersPerAggregate: true,
    carriesNativeId: true,
    batchLimit: undefined,
    maxMessageBytes: HOOK_MAX_BODY_BYTES,
    failingStatus: 'permanent',
    failingMessage: (message) => ({ ...message, headers: { ...message.headers, reject: 'yes' } }),
  },
  async setup() {
    conformanceHook = await startTestWebhook();
    conformanceHook.onRequest = (request, response) => {
      // Verified under each secret on its own, as two receivers mid-rotation would.
      for (const verifier of verifiers) {
        try {
          verifier.verify(request.body, headersOf(request));
        } catch (error) {
          refused.push((error as Error).message);
          response.writeHead(401).end();
          return;
        }
      }
      verifiedRequests++;
      if (Buffer.byteLength(request.body) > HOOK_MAX_BODY_BYTES) {
        response.writeHead(413).end('payload too large');
        return;
      }
      const envelope = JSON.parse(request.body) as {
        id: string;
        topic: string;
        headers: Record<string, string>;
      };
      if (request.headers['webhook-id'] !== envelope.id) refused.push('webhook-id is not the id');
      if (envelope.headers.reject) {
        response.writeHead(422).end('rejected');
        return;
      }
      collectorsByTopic.get(envelope.topic)?.push({
        body: request.body,
        nativeId: request.headers['webhook-id'] as string,
      });
      response.writeHead(204).end();
    };
  },
  teardown: () => conformanceHook.close(),
  create: () =>
    new HttpPublisher({
      url: `${conformanceHook.baseUrl}/hook`,
      signingSecrets: [CURRENT, PREVIOUS],
    }),
  createUnreachable: async () =>
    new HttpPublisher({
      url: `http://127.0.0.1:${await closedPort()}/hook`,
      signingSecrets: [CURRENT],
    }),
  collector: createCollector,
  throughProxy: {
    brokerPort: () => Number(new URL(conformanceHook.baseUrl).port),
    create: (port) =>
      new HttpPublisher({
        url: `http://127.0.0.1:${port}/hook`,
        signingSecrets: [CURRENT, PREVIOUS],
      }),
  },
  async receive(topics, collector) {
    for (const topic of topics) collectorsByTopic.set(topic, collector);
    return async () => {
      for (const topic of topics) collectorsByTopic.delete(topic);
    };
  },
});

describe('HttpPublisher signing (Standard Webhooks)', () => {
  let hook: TestWebhook;

  beforeAll(async () => {
    hook = await startTestWebhook();
  });
  afterAll(() => hook.close());
  beforeEach(() => {
    hook.requests.length = 0;
    hook.onRequest = (_request, response) => response.writeHead(204).end();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('the conformance run above: every request verified under each of the two secrets', () => {
    // Hundreds of requests: batches, partial failures, oversized bodies, a cut connection.
    expect(refused).toEqual([]);
    expect(verifiedRequests).toBeGreaterThan(500);
  });

  it('every request verifies with new Webhook(secret).verify(body, headers), non-ASCII included', async () => {
    const secret = secretOf();
    const publisher = new HttpPublisher({
      url: `${hook.baseUrl}/outbox`,
      signingSecrets: [secret],
    });
    const messages = [
      makeMessage({ payload: { text: AWKWARD_TEXT } }),
      makeMessage({ payload: AWKWARD_TEXT, headers: { note: AWKWARD_TEXT } }),
      makeMessage({ aggregateId: `käse-${AWKWARD_TEXT.slice(0, 12)}` }),
      ...Array.from({ length: 20 }, (_, i) =>
        makeMessage({ payload: { i, big: 'ü'.repeat(i * 500) } }),
      ),
    ];

    const outcomes = await publisher.publish(messages);

    expect(outcomes.every((o) => o.status === 'published')).toBe(true);
    expect(hook.requests).toHaveLength(messages.length);
    const webhook = new Webhook(secret);
    const nowSeconds = Date.now() / 1000;
    for (const request of hook.requests) {
      const headers = headersOf(request);
      const verified = webhook.verify(request.body, headers) as { id: string };
      const message = messages.find((m) => m.id === verified.id)!;
      expect(verified).toEqual(JSON.parse(JSON.stringify(toEnvelope(message))));
      expect(headers['webhook-id']).toBe(message.id);
      expect(headers['idempotency-key']).toBe(message.id);
      expect(headers['content-type']).toBe('application/json');
      expect(headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
      expect(Math.abs(Number(headers['webhook-timestamp']) - nowSeconds)).toBeLessThan(30);
      // The body signed is the body sent: one changed byte and it no longer verifies.
      const tampered = request.body.replace('"sequence":1', '"sequence":2');
      expect(tampered).not.toBe(request.body);
      expect(() => webhook.verify(tampered, headers)).toThrow(/No matching signature/);
    }
  });

  it('with two secrets sends two signatures; each verifies alone, an unrelated secret does not', async () => {
    const [current, previous] = [secretOf(), secretOf(64)];
    const publisher = new HttpPublisher({ url: hook.baseUrl, signingSecrets: [current, previous] });

    await publisher.publish([makeMessage({ payload: { text: AWKWARD_TEXT } })]);

    const [request] = hook.requests as [ReceivedRequest];
    const headers = headersOf(request);
    expect(headers['webhook-signature']!.split(' ')).toHaveLength(2);
    expect(new Webhook(current).verify(request.body, headers)).toBeTruthy();
    expect(new Webhook(previous).verify(request.body, headers)).toBeTruthy();
    expect(() => new Webhook(secretOf()).verify(request.body, headers)).toThrow(
      /No matching signature/,
    );
  });

  it('stamps each attempt with its own time, so a late retry still verifies', async () => {
    const secret = secretOf();
    const publisher = new HttpPublisher({ url: hook.baseUrl, signingSecrets: [secret] });
    const message = makeMessage();
    vi.useFakeTimers({ toFake: ['Date'] });
    const later = Date.UTC(2031, 4, 6, 7, 8, 9);
    vi.setSystemTime(later);

    await publisher.publish([message]);

    const headers = headersOf(hook.requests[0]!);
    expect(headers['webhook-timestamp']).toBe(String(later / 1000));
    // The library's clock is the faked one too: verified "now", an hour after createdAt or not.
    expect(new Webhook(secret).verify(hook.requests[0]!.body, headers)).toBeTruthy();
  });

  it('without signingSecrets sends no webhook-* headers (unchanged), and a verifier refuses it', async () => {
    await new HttpPublisher({ url: hook.baseUrl }).publish([makeMessage()]);

    const [request] = hook.requests as [ReceivedRequest];
    expect(Object.keys(request.headers).filter((h) => h.startsWith('webhook-'))).toEqual([]);
    expect(() => new Webhook(secretOf()).verify(request.body, headersOf(request))).toThrow(
      /Missing required headers/,
    );
  });

  it('keeps its secrets out of the error text when the receiver echoes them', async () => {
    const secret = secretOf();
    const bare = secret.slice('whsec_'.length);
    hook.onRequest = (_request, response) =>
      response
        .writeHead(401)
        .end(`bad signature; I expected one made with ${secret} (raw ${bare.replace(/=+$/, '')})`);
    const publisher = new HttpPublisher({ url: hook.baseUrl, signingSecrets: [secret] });

    const [outcome] = await publisher.publish([makeMessage()]);

    expect(outcome!.status).toBe('permanent');
    const error = outcome!.status === 'permanent' ? outcome!.error : '';
    expect(error).toMatch(/^HTTP 401: bad signature/);
    expect(error).not.toContain(bare.slice(0, 20));
    expect(error).toContain('[REDACTED]');
  });

  it('refuses malformed secrets at construction without echoing them', () => {
    const raw = randomBytes(32).toString('base64');
    const attempts: [string[], RegExp][] = [
      [[raw], /signingSecrets\[0\] does not start with "whsec_"/],
      [[secretOf(), `whsec_${raw.slice(0, 8)}`], /signingSecrets\[1\] holds a 6-byte key/],
      // 9 characters: no base64 encoding has a length of 4n+1, so this can never round-trip (10
      // characters did when the last one happened to carry no stray bits: a flaky test).
      [[`whsec_${raw.slice(0, 9)}`], /not standard base64.*cut-off/],
      [[`whsec_${raw.replace(/\+|\//g, '-')}x`], /base64/],
      [[], /is empty/],
    ];
    for (const [signingSecrets, message] of attempts) {
      let error: unknown;
      try {
        new HttpPublisher({ url: hook.baseUrl, signingSecrets });
      } catch (caught) {
        error = caught;
      }
      expect(error).toBeInstanceOf(WebhookSecretError);
      expect((error as Error).message).toMatch(message);
      expect((error as Error).message).not.toContain(raw.slice(0, 8));
    }
  });
});
