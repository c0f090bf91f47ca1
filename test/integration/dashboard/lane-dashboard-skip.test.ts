import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OutboxMessage } from '../../../src/core/message.js';
import { startDashboard, type Dashboard } from '../../../src/dashboard/server.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';

/**
 * The dashboard's Skip on the lanes engine (`outbox ui --engine lanes`): `/api/state` says which
 * dead letters hold their aggregate (`blocking`), `POST /api/skip` gives one up
 * (`skipLaneDeadLetters`), and the aggregate's later messages are then published in order.
 */
let db: TestDatabase;
let lanes: Dashboard;
let claims: Dashboard;
beforeAll(async () => {
  db = await createTestDatabase();
  const executor = fromPg(db.pool);
  lanes = await startDashboard({ executor, engine: 'lanes', port: 0, sampleIntervalMs: 60_000 });
  claims = await startDashboard({ executor, port: 0, sampleIntervalMs: 60_000 });
});
afterAll(async () => {
  await lanes?.close();
  await claims?.close();
  await db?.drop();
});

const post = (dashboard: Dashboard, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${dashboard.url}api/skip`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });

type Dead = { id: string; messageId: string; aggregateId: string; blocking?: boolean };
const deadLetters = async (): Promise<Dead[]> =>
  ((await (await fetch(`${lanes.url}api/state`)).json()) as { deadLetters: Dead[] }).deadLetters;

describe('dashboard, lanes engine: Skip', () => {
  it('skips a dead letter that holds its aggregate; the rest goes out in order', async () => {
    const charge = (n: number): OutboxMessage => ({
      topic: 'payment.charge',
      aggregateId: 'order-7',
      payload: { n },
    });
    const written = await enqueueLanes(db.pool, [charge(1), charge(2), charge(3)]);
    const poison = written[0]!.messageId;
    const publisher = new InMemoryPublisher({
      inject: (m) => (m.id === poison ? { status: 'retryable', error: 'refused' } : undefined),
    });
    const drain = () =>
      createLaneDispatcher({
        executor: fromPg(db.pool),
        publisher,
        maxAttempts: 1,
        backoff: { baseMs: 0, maxMs: 0, jitterMs: 0 },
      }).drain();
    await drain();
    expect(publisher.published).toEqual([]);
    expect(await deadLetters()).toMatchObject([
      { messageId: poison, aggregateId: 'order-7', blocking: true },
    ]);

    // Refused: a cross-site post, a body without ids, an id that is not a message id.
    expect((await post(lanes, { ids: [poison] }, { origin: 'http://evil.example' })).status).toBe(
      403,
    );
    expect((await post(lanes, { id: poison })).status).toBe(400);
    const malformed = await post(lanes, { ids: ['3:1'] });
    expect(malformed.status).toBe(400);
    expect(((await malformed.json()) as { error: string }).error).toContain('not a message id');
    // The claim engine's dashboard has no Skip, and says what to do instead.
    const onClaims = await post(claims, { ids: [poison] });
    expect(onClaims.status).toBe(400);
    expect(((await onClaims.json()) as { error: string }).error).toContain('lanes engine');
    expect(await deadLetters()).toMatchObject([{ messageId: poison, blocking: true }]);

    const response = await post(lanes, { ids: [poison] });
    expect(response.status).toBe(200);
    const [dead] = await deadLetters();
    expect(await response.json()).toEqual({
      skipped: [
        { id: dead!.id, messageId: poison, topic: 'payment.charge', aggregateId: 'order-7' },
      ],
    });
    // Still listed (never published), no longer holding its aggregate: no Skip offered again.
    expect(dead).toMatchObject({ messageId: poison, blocking: false });
    expect(await (await post(lanes, { ids: [poison] })).json()).toEqual({ skipped: [] });

    await drain();
    expect(publisher.published.map((m) => m.sequence)).toEqual([2, 3]);
  });

  it('serves the page with the Skip button wired to /api/skip', async () => {
    const page = await (await fetch(lanes.url)).text();
    expect(page).toContain("fetch('/api/skip'");
    expect(page).toContain('d.blocking');
  });
});
