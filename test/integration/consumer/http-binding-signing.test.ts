import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createHttpReceiver,
  type HttpReceiverOptions,
} from '../../../src/consumer/bindings/http.js';
import { HttpPublisher } from '../../../src/publishers/http/http-publisher.js';
import { WebhookSecretError } from '../../../src/publishers/http/standard-webhooks.js';
import { makeMessage } from '../../contract/messages.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { effectConsumer } from '../../fixtures/consumer/effects.js';
import { makeEnvelope } from '../../fixtures/consumer/envelopes.js';

// Requests are signed by the `standardwebhooks` package (the spec's reference library), so the
// receiver is checked against an implementation that is not ours.
const secretOf = (bytes = 32) => `whsec_${randomBytes(bytes).toString('base64')}`;
const SECRET = secretOf();
const MINUTE_MS = 60_000;

let db: TestDatabase;
let fixture: Awaited<ReturnType<typeof effectConsumer>>;
const servers: Server[] = [];
const unauthorized: string[] = [];

/** Serves `createHttpReceiver(fixture.consumer, options)` on a free port; returns its URL. */
async function serve(options: HttpReceiverOptions): Promise<string> {
  const server = createServer(createHttpReceiver(fixture.consumer, options));
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
}

let url: string;
beforeAll(async () => {
  db = await createTestDatabase();
  fixture = await effectConsumer(db.pool, 'signed-webhook');
  url = await serve({
    signingSecrets: [SECRET],
    onUnauthorized: (reason) => unauthorized.push(reason),
  });
});
afterAll(async () => {
  for (const server of servers) await new Promise((resolve) => server.close(resolve));
  await db.drop();
});

/** Headers the reference library produces for `body`, as a compliant sender sends them. */
function signed(body: string, options: { id: string; at?: Date; secret?: string }) {
  const at = options.at ?? new Date();
  return {
    'webhook-id': options.id,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': new Webhook(options.secret ?? SECRET).sign(options.id, at, body),
  };
}

const post = (target: string, body: string, headers: Record<string, string> = {}) =>
  fetch(target, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });

/** Everything the receiver did for one message id: handler calls, effects, ledger rows. */
async function traces(id: string) {
  const ledger = await db.pool.query(
    `SELECT state FROM processed_messages WHERE consumer = 'signed-webhook' AND message_id = $1`,
    [id],
  );
  return {
    handled: fixture.seen.filter((seen) => seen === id).length,
    effects: (await fixture.effects()).filter((effect) => effect === id).length,
    ledger: ledger.rows.map((row: { state: string }) => row.state),
  };
}

describe('createHttpReceiver with signingSecrets', () => {
  it('performs a request signed by the standardwebhooks library, once (webhook-id is the id)', async () => {
    const envelope = makeEnvelope({ payload: { amount: 1200, note: 'grüße ✓ 日本語 🎉' } });
    const body = JSON.stringify(envelope);
    // No Idempotency-Key: a plain Standard Webhooks sender only sends webhook-id.
    const response = await post(url, body, signed(body, { id: envelope.id }));

    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ action: 'ack', reason: 'processed' });
    expect(await traces(envelope.id)).toEqual({ handled: 1, effects: 1, ledger: ['done'] });

    // The same delivery again, re-signed: deduplicated by id, not performed twice.
    const again = await post(url, body, signed(body, { id: envelope.id }));
    expect(again.status).toBe(200);
    expect(await again.json()).toMatchObject({ reason: 'duplicate' });
    expect((await traces(envelope.id)).effects).toBe(1);
  });

  const refusals: [string, (body: string, id: string) => [string, Record<string, string>]][] = [
    ['unsigned', (body) => [body, {}]],
    ['unsigned with only an Idempotency-Key', (body, id) => [body, { 'idempotency-key': id }]],
    ['with a tampered body', (body, id) => [body.replace('1200', '9999'), signed(body, { id })]],
    ['signed with a wrong secret', (body, id) => [body, signed(body, { id, secret: secretOf() })]],
    [
      'with a timestamp 10 minutes old',
      (body, id) => [body, signed(body, { id, at: new Date(Date.now() - 10 * MINUTE_MS) })],
    ],
    [
      'with a timestamp 10 minutes ahead',
      (body, id) => [body, signed(body, { id, at: new Date(Date.now() + 10 * MINUTE_MS) })],
    ],
    [
      'with a signature made for another webhook-id',
      (body, id) => [body, { ...signed(body, { id: `${id}-other` }), 'webhook-id': id }],
    ],
    [
      'with a current timestamp pasted onto an old signature',
      (body, id) => {
        const old = signed(body, { id, at: new Date(Date.now() - 10 * MINUTE_MS) });
        return [body, { ...old, 'webhook-timestamp': String(Math.floor(Date.now() / 1000)) }];
      },
    ],
    [
      'without webhook-timestamp',
      (body, id) => {
        const { 'webhook-timestamp': _dropped, ...rest } = signed(body, { id });
        return [body, rest];
      },
    ],
  ];
  it.each(refusals)(
    'refuses a request %s with 401: nothing performed, nothing in the ledger',
    async (_case, make) => {
      const envelope = makeEnvelope();
      const [body, headers] = make(JSON.stringify(envelope), envelope.id);
      const before = unauthorized.length;

      const response = await post(url, body, headers);

      expect(response.status).toBe(401);
      expect(await response.json()).toMatchObject({ error: 'unauthorized' });
      expect(await traces(envelope.id)).toEqual({ handled: 0, effects: 0, ledger: [] });
      expect(unauthorized.length).toBe(before + 1);
      expect(unauthorized.at(-1)).not.toContain(SECRET.slice(6));
    },
  );

  it('says why in the 401, for the sender to see in last_error', async () => {
    const envelope = makeEnvelope();
    const body = JSON.stringify(envelope);
    const old = await post(
      url,
      body,
      signed(body, { id: envelope.id, at: new Date(Date.now() - 10 * MINUTE_MS) }),
    );
    expect(((await old.json()) as { reason: string }).reason).toMatch(
      /webhook-timestamp is 6\d\d s old/,
    );
    const forged = await post(url, body, signed(body, { id: envelope.id, secret: secretOf() }));
    expect(((await forged.json()) as { reason: string }).reason).toMatch(
      /no webhook-signature matches/,
    );
  });

  it('a validly signed request whose webhook-id differs from the envelope id is poison (400)', async () => {
    const envelope = makeEnvelope();
    const body = JSON.stringify(envelope);
    const response = await post(url, body, signed(body, { id: 'someone-else' }));
    expect(response.status).toBe(400);
    expect(await traces(envelope.id)).toEqual({ handled: 0, effects: 0, ledger: [] });
  });

  it('the tolerance is configurable: 15 minutes accepts a 10-minute-old timestamp', async () => {
    const lenient = await serve({ signingSecrets: [SECRET], timestampToleranceMs: 15 * MINUTE_MS });
    const envelope = makeEnvelope();
    const body = JSON.stringify(envelope);
    const headers = signed(body, { id: envelope.id, at: new Date(Date.now() - 10 * MINUTE_MS) });
    expect((await post(url, body, headers)).status).toBe(401);
    expect((await post(lenient, body, headers)).status).toBe(200);
    expect((await traces(envelope.id)).effects).toBe(1);
  });

  it('rotation: accepts our publisher signing with the old, the new, or both secrets', async () => {
    const [current, previous] = [secretOf(), secretOf()];
    const rotating = await serve({ signingSecrets: [current, previous] });
    const onlyCurrent = await serve({ signingSecrets: [current] });
    const send = (target: string, signingSecrets: string[]) => {
      const message = makeMessage({ topic: 'payment.charge', payload: { amount: 5 } });
      return new HttpPublisher({ url: target, signingSecrets }).publish([message]);
    };

    // Step 1: the receiver accepts both; the sender still signs with the old one.
    expect(await send(rotating, [previous])).toEqual([{ status: 'published' }]);
    // Step 2: the sender signs with both (receivers that know either one accept).
    expect(await send(rotating, [current, previous])).toEqual([{ status: 'published' }]);
    expect(await send(onlyCurrent, [current, previous])).toEqual([{ status: 'published' }]);
    // Step 3: the old secret is gone from the receiver: old-only requests are refused.
    const [refused] = await send(onlyCurrent, [previous]);
    expect(refused).toMatchObject({
      status: 'permanent',
      error: expect.stringMatching(/HTTP 401/),
    });
  });

  it('refuses malformed or empty secrets when created, without echoing them', () => {
    const raw = randomBytes(32).toString('base64');
    expect(() => createHttpReceiver(fixture.consumer, { signingSecrets: [raw] })).toThrow(
      WebhookSecretError,
    );
    expect(() => createHttpReceiver(fixture.consumer, { signingSecrets: [raw] })).not.toThrow(
      new RegExp(raw.slice(0, 12).replace(/[+/]/g, '\\$&')),
    );
    expect(() => createHttpReceiver(fixture.consumer, { signingSecrets: [] })).toThrow(/empty/);
    expect(() =>
      createHttpReceiver(fixture.consumer, { signingSecrets: [SECRET], timestampToleranceMs: 0 }),
    ).toThrow(RangeError);
  });
});

describe('createHttpReceiver without signingSecrets (unchanged; keep it unreachable)', () => {
  it('performs unsigned requests, and takes webhook-id like Idempotency-Key', async () => {
    const open = await serve({});
    const envelope = makeEnvelope();
    const body = JSON.stringify(envelope);
    expect((await post(open, body)).status).toBe(200);
    expect((await traces(envelope.id)).effects).toBe(1);

    const other = makeEnvelope();
    const mismatch = await post(open, JSON.stringify(other), { 'webhook-id': envelope.id });
    expect(mismatch.status).toBe(400);
    expect(await traces(other.id)).toEqual({ handled: 0, effects: 0, ledger: [] });
  });
});
