import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createHttpReceiver } from '../../../src/consumer/bindings/http.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { effectConsumer } from '../../fixtures/consumer/effects.js';
import { makeEnvelope } from '../../fixtures/consumer/envelopes.js';

let db: TestDatabase;
let server: Server;
let url: string;
let fixture: Awaited<ReturnType<typeof effectConsumer>>;

beforeAll(async () => {
  db = await createTestDatabase();
  fixture = await effectConsumer(db.pool, 'webhook');
  server = createServer(createHttpReceiver(fixture.consumer, { maxBodyBytes: 10_000 }));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/`;
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  await db.drop();
});

const post = (body: string, key?: string) =>
  fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
    body,
  });

it('200 only once the effect is recorded; a duplicate POST is 200 without a second effect', async () => {
  const envelope = makeEnvelope();
  const response = await post(JSON.stringify(envelope), envelope.id);
  expect(response.status).toBe(200);
  expect(await response.json()).toMatchObject({ action: 'ack', reason: 'processed' });
  // The 200 was sent after the commit: the ledger row is already there.
  const { rows } = await db.pool.query(
    `SELECT state FROM processed_messages WHERE consumer = 'webhook' AND message_id = $1`,
    [envelope.id],
  );
  expect(rows).toEqual([{ state: 'done' }]);
  const again = await post(JSON.stringify(envelope), envelope.id);
  expect(again.status).toBe(200);
  expect(await again.json()).toMatchObject({ reason: 'duplicate' });
  expect((await fixture.effects()).filter((id) => id === envelope.id)).toHaveLength(1);
});

it('503 + Retry-After on handler failure; the redelivery succeeds', async () => {
  const envelope = makeEnvelope({ payload: { failTimes: 1 } });
  const failed = await post(JSON.stringify(envelope), envelope.id);
  expect(failed.status).toBe(503);
  expect(Number(failed.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  expect((await fixture.effects()).includes(envelope.id)).toBe(false);
  expect((await post(JSON.stringify(envelope), envelope.id)).status).toBe(200);
  expect((await fixture.effects()).filter((id) => id === envelope.id)).toHaveLength(1);
});

it('4xx for poison: malformed, key mismatch, permanent failure, too large, wrong method', async () => {
  expect((await post('{"id":')).status).toBe(400);
  const envelope = makeEnvelope();
  expect((await post(JSON.stringify(envelope), 'another-id')).status).toBe(400);
  expect(fixture.seen).not.toContain(envelope.id);
  const rejected = makeEnvelope({ payload: { permanent: true } });
  expect((await post(JSON.stringify(rejected), rejected.id)).status).toBe(422);
  const huge = makeEnvelope({ payload: { text: 'x'.repeat(20_000) } });
  expect((await post(JSON.stringify(huge))).status).toBe(413);
  expect((await fetch(url)).status).toBe(405);
  // Still serving.
  const next = makeEnvelope();
  expect((await post(JSON.stringify(next), next.id)).status).toBe(200);
});
