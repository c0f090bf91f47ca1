import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createEffectStatusCall } from '../../../src/agent/effect-status-call.js';
import { pgPoolTransactions } from '../../../src/agent/index.js';
import { rejectMessages } from '../../../src/admin/approvals.js';
import { readEffectStatus, type EffectStatusQuery } from '../../../src/admin/effect-status.js';
import type { OutboxMessage } from '../../../src/core/message.js';
import type { Dispatcher } from '../../../src/dispatcher/dispatcher.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import type { Publisher } from '../../../src/publishers/publisher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createOutbox } from '../../../src/writer/create-outbox.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';

/**
 * The effect status on the lanes engine (`engine: 'lanes'`): each state read from the lanes
 * tables, with a real lane dispatcher; the claim engine's states (test/integration/agent/
 * approvals-tools.test.ts) in the same shape.
 */
const outbox = createOutbox({ engine: 'lanes' });
let db: TestDatabase;
let running: Dispatcher[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
});
afterEach(async () => {
  await Promise.all(running.map((d) => d.stop()));
  running = [];
});
afterAll(() => db.drop());

async function write(messages: OutboxMessage[]) {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    const result = await outbox.enqueue(fromPg(client), messages);
    await client.query('COMMIT');
    return result;
  } finally {
    client.release();
  }
}

const msg = (aggregateId: string, extra: Partial<OutboxMessage> = {}) =>
  ({ topic: 'payment.refund', aggregateId, payload: { aggregateId }, ...extra }) as OutboxMessage;

const status = (query: EffectStatusQuery) =>
  readEffectStatus(fromPg(db.pool), { engine: 'lanes', ...query }).then((r) => r.effects);

async function waitFor(condition: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > until) throw new Error('condition not reached');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Publishes everything but the aggregates in `failing` (a retryable error, `down: <aggregate>`). */
function dispatch(failing: readonly string[] = [], options: { maxAttempts?: number } = {}) {
  const published: string[] = [];
  const publisher: Publisher = {
    publish: async (messages) =>
      messages.map((m) => {
        if (failing.includes(m.aggregateId))
          return { status: 'retryable' as const, error: `down: ${m.aggregateId}` };
        published.push(m.id);
        return { status: 'published' as const };
      }),
  };
  const dispatcher = createLaneDispatcher({
    executor: fromPg(db.pool),
    publisher,
    pollIntervalMs: 20,
    maxAttempts: options.maxAttempts ?? 50,
    backoff: { baseMs: 60_000, maxMs: 60_000, jitterMs: 0 },
  });
  dispatcher.start();
  running.push(dispatcher);
  return { published, dispatcher };
}

describe('effect status on the lanes engine', () => {
  it('pending above the cursor, then published once the lane dispatcher passed it', async () => {
    const [m] = await write([msg('p-1')]);
    // By message id and by the row id the writer returned: the same message.
    const before = await status({ messageIds: [m!.messageId, m!.id] });
    expect(before).toEqual([
      expect.objectContaining({ messageId: m!.messageId, state: 'pending', attempts: 0 }),
      expect.objectContaining({
        messageId: m!.messageId,
        state: 'pending',
        topic: 'payment.refund',
      }),
    ]);
    // By row id alone: a primary-key probe per lane, no message id to go by.
    expect(await status({ messageIds: [m!.id] })).toEqual([
      expect.objectContaining({ messageId: m!.messageId, state: 'pending', aggregateId: 'p-1' }),
    ]);
    const { published } = dispatch();
    await waitFor(() => published.includes(m!.messageId));
    await waitFor(
      async () => (await status({ messageIds: [m!.messageId] }))[0]!.state !== 'pending',
    );
    const [after] = await status({ messageIds: [m!.messageId] });
    expect(after).toEqual({
      messageId: m!.messageId,
      state: 'published',
      topic: 'payment.refund',
      aggregateId: 'p-1',
    });
  });

  it('failed (retrying) with its attempts and last error, and dead after maxAttempts', async () => {
    const [retrying] = await write([msg('r-1')]);
    dispatch(['r-1']);
    await waitFor(
      async () => (await status({ messageIds: [retrying!.messageId] }))[0]!.state === 'failed',
    );
    const [failed] = await status({ messageIds: [retrying!.messageId] });
    expect(failed).toMatchObject({ state: 'failed', attempts: 1, lastError: 'down: r-1' });
    expect(new Date(failed!.nextTryAt!).getTime()).toBeGreaterThan(Date.now() + 30_000);
    await Promise.all(running.map((d) => d.stop()));
    running = [];

    const [dead] = await write([msg('d-1')]);
    dispatch(['d-1'], { maxAttempts: 1 });
    await waitFor(
      async () => (await status({ messageIds: [dead!.messageId] }))[0]!.state === 'dead',
    );
    expect((await status({ messageIds: [dead!.messageId] }))[0]).toMatchObject({
      state: 'dead',
      attempts: 1,
      lastError: 'down: d-1',
    });
  });

  it('awaiting approval, then rejected, from the decision rows; a held message is never published', async () => {
    const [held] = await write([msg('h-1', { requiresApproval: true })]);
    dispatch();
    await waitFor(async () => {
      const { rows } = await db.pool.query('SELECT 1 FROM outbox_lane_parked WHERE id = $1', [
        held!.id,
      ]);
      return rows.length === 1;
    });
    const [awaiting] = await status({ messageIds: [held!.messageId] });
    expect(awaiting).toMatchObject({ state: 'awaiting approval', aggregateId: 'h-1' });
    expect(new Date(awaiting!.expiresAt!).getTime()).toBeGreaterThan(Date.now());
    await rejectMessages(fromPg(db.pool), [held!.id], {
      by: 'alice',
      reason: 'duplicate refund',
      engine: 'lanes',
    });
    const [rejected] = await status({ messageIds: [held!.messageId] });
    expect(rejected).toMatchObject({
      state: 'rejected',
      decidedBy: 'alice',
      reason: 'duplicate refund',
    });
    expect(rejected!.decidedAt).toBeDefined();
  });

  it('performed by a consumer (its ledger), published ahead for a share, tenants and unknown ids', async () => {
    const [mine, theirs] = await write([
      msg('t-1', { tenantId: 'acme' }),
      msg('t-2', { tenantId: 'globex' }),
    ]);
    const { published } = dispatch();
    await waitFor(
      () => published.includes(mine!.messageId) && published.includes(theirs!.messageId),
    );
    await waitFor(
      async () => (await status({ messageIds: [mine!.messageId] }))[0]!.state === 'published',
    );
    await db.pool.query(
      `INSERT INTO processed_messages (consumer, message_id, state) VALUES ('payments', $1, 'done')`,
      [mine!.messageId],
    );
    const unknown = '0190a000-0000-7000-8000-000000000000';
    const effects = await status({
      messageIds: [mine!.messageId, theirs!.messageId, unknown, '999999999'],
      tenantId: 'acme',
      consumers: ['payments'],
    });
    expect(effects).toEqual([
      expect.objectContaining({
        messageId: mine!.messageId,
        state: 'performed',
        performedBy: [{ consumer: 'payments', at: expect.any(String) }],
      }),
      { messageId: theirs!.messageId, state: 'not found' },
      { messageId: unknown, state: 'not found' },
      { messageId: '999999999', state: 'not found' },
    ]);
    // Without the consumer: published; the other tenant's is found by its own tenant.
    expect((await status({ messageIds: [mine!.messageId] }))[0]!.state).toBe('published');
    expect((await status({ messageIds: [theirs!.messageId], tenantId: 'globex' }))[0]!.state).toBe(
      'published',
    );
    await Promise.all(running.map((d) => d.stop()));
    running = [];

    // Published ahead of its lane's cursor for a tenant's share (migration 028): published.
    const [ahead] = await write([msg('a-1', { tenantId: 'acme' })]);
    expect((await status({ messageIds: [ahead!.messageId] }))[0]!.state).toBe('pending');
    await db.pool.query(
      `INSERT INTO outbox_lane_ahead (lane, id, tenant)
       SELECT lane, id, 'acme' FROM outbox_lane_messages WHERE id = $1`,
      [ahead!.id],
    );
    expect((await status({ messageIds: [ahead!.messageId] }))[0]!.state).toBe('published');
    await db.pool.query('DELETE FROM outbox_lane_ahead WHERE id = $1', [ahead!.id]);
  });

  it('a row id is refused on the claim engine; engine is validated', async () => {
    await expect(readEffectStatus(fromPg(db.pool), { messageIds: ['12'] })).rejects.toThrow(
      /not a message id/,
    );
    await expect(
      readEffectStatus(fromPg(db.pool), {
        messageIds: ['0190a000-0000-7000-8000-000000000000'],
        engine: 'lane' as 'lanes',
      }),
    ).rejects.toThrow(/must be 'claims' or 'lanes'/);
  });

  it('the effect status tool reads the lanes engine with engine: lanes', async () => {
    const [m] = await write([msg('tool-1', { tenantId: 'acme' })]);
    const onLanes = createEffectStatusCall({
      transactions: pgPoolTransactions(db.pool),
      engine: 'lanes',
      tenantId: 'acme',
    });
    const answer = await onLanes.call({ message_ids: [m!.messageId] });
    expect(answer.json).toEqual({
      ok: true,
      effects: [expect.objectContaining({ messageId: m!.messageId, state: 'pending' })],
    });
    // The claim engine's tables do not hold it.
    const onClaims = createEffectStatusCall({ transactions: pgPoolTransactions(db.pool) });
    expect((await onClaims.call({ message_ids: [m!.messageId] })).json).toEqual({
      ok: true,
      effects: [{ messageId: m!.messageId, state: 'not found' }],
    });
  });
});
