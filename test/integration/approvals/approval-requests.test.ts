import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  approveMessages,
  createDispatcher,
  createOutbox,
  fromPg,
  OutboxValidationError,
} from '../../../src/index.js';
import { HttpPublisher } from '../../../src/publishers/http/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { resetOutbox } from '../../helpers/outbox-fixtures.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

/**
 * Issue 20, optional part: an approval request published as a message of its own, on a topic the
 * writer names, so a person hears of a held effect (e.g. through a router to a chat webhook).
 */
let db: TestDatabase;
let receiver: WebhookReceiver;
beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startWebhookReceiver();
});
afterAll(async () => {
  await receiver?.close();
  await db?.drop();
});
beforeEach(async () => {
  await resetOutbox(db.pool);
  receiver.envelopes.length = 0;
});

const traceparent = `00-${'4bf92f3577b34da6a3ce929d0e0e4736'}-${'00f067aa0ba902b7'}-01`;

async function inTransaction<T>(fn: (executor: ReturnType<typeof fromPg>) => Promise<T>) {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(fromPg(client));
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  } finally {
    client.release();
  }
}

describe('approval requests (createOutbox({ approvalRequests }))', () => {
  const outbox = createOutbox({ approvalRequests: { topic: 'approvals.requested' } });

  it('writes one request per held message, in the same transaction, saying what the database decided', async () => {
    const [held, plain] = await inTransaction((tx) =>
      outbox.enqueue(tx, [
        {
          topic: 'payment.refund',
          aggregateId: 'order:42',
          payload: { amount: 50_000, note: null },
          headers: { traceparent },
          requiresApproval: true,
          approvalRequestedBy: 'tool refund_order',
          approvalExpiresInMs: 3_600_000,
        },
        { topic: 'mail.send', aggregateId: 'order:43', payload: { template: 'receipt' } },
      ]),
    );
    expect(held!.awaitingApproval).toBe(true);
    expect(held!.approvalRequestId).toMatch(/^[0-9a-f-]{36}$/);
    expect(plain!.approvalRequestId).toBeUndefined();

    const { rows } = await db.pool.query(
      `SELECT r.aggregate_id, r.ordered, r.ready, r.approval_state, r.payload, r.headers,
              h.approval_expires_at AS held_expires_at
       FROM outbox r, outbox h
       WHERE r.topic = 'approvals.requested' AND h.message_id = $1`,
      [held!.messageId],
    );
    expect(rows).toHaveLength(1);
    const request = rows[0]!;
    expect(request.aggregate_id).toBe('approval:order:42');
    expect(request.ordered).toBe(false);
    expect(request.ready).toBe(true);
    expect(request.approval_state).toBeNull();
    expect(request.payload).toEqual({
      messageId: held!.messageId,
      topic: 'payment.refund',
      aggregateId: 'order:42',
      sequence: held!.sequence,
      requestedBy: 'tool refund_order',
      expiresAt: expect.any(String),
      onExpiry: 'reject',
      // The held payload as written, its null included.
      payload: { amount: 50_000, note: null },
    });
    expect(new Date(request.payload.expiresAt as string).getTime()).toBe(
      (request.held_expires_at as Date).getTime(),
    );
    expect(request.headers).toEqual({ schema_version: '1', traceparent });
    const count = await db.pool.query(`SELECT count(*)::int AS n FROM outbox`);
    expect(count.rows[0].n).toBe(3);
  });

  it('writes nothing when the transaction rolls back', async () => {
    await expect(
      inTransaction(async (tx) => {
        await outbox.enqueue(tx, {
          topic: 'payment.refund',
          aggregateId: 'order:7',
          payload: {},
          requiresApproval: true,
        });
        throw new Error('business rule failed');
      }),
    ).rejects.toThrow('business rule failed');
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM outbox`);
    expect(rows[0].n).toBe(0);
  });

  it('includePayload: false leaves the held payload out', async () => {
    const writer = createOutbox({
      approvalRequests: { topic: 'approvals.requested', includePayload: false },
    });
    const [held] = await inTransaction((tx) =>
      writer.enqueue(tx, [
        {
          topic: 'payment.refund',
          aggregateId: 'order:9',
          payload: { card: 'secret' },
          requiresApproval: true,
        },
      ]),
    );
    const { rows } = await db.pool.query(
      `SELECT payload FROM outbox WHERE topic = 'approvals.requested'`,
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].payload.messageId).toBe(held!.messageId);
    expect(rows[0].payload).not.toHaveProperty('payload');
  });

  it('is dispatched while the message it asks about stays held, and that one goes out once approved', async () => {
    const [held] = await inTransaction((tx) =>
      outbox.enqueue(tx, [
        {
          topic: 'payment.refund',
          aggregateId: 'order:5',
          payload: { amount: 10 },
          requiresApproval: true,
        },
      ]),
    );
    const publisher = new HttpPublisher({ url: receiver.url });
    const dispatch = () => createDispatcher({ executor: fromPg(db.pool), publisher }).drain();
    expect(await dispatch()).toMatchObject({ published: 1, failed: false });
    expect(receiver.envelopes.map((e) => [e.topic, e.aggregateId])).toEqual([
      ['approvals.requested', 'approval:order:5'],
    ]);
    expect((receiver.envelopes[0]!.payload as { messageId: string }).messageId).toBe(
      held!.messageId,
    );
    await approveMessages(fromPg(db.pool), [held!.id], { by: 'alice' });
    expect(await dispatch()).toMatchObject({ published: 1, failed: false });
    expect(receiver.envelopes.map((e) => e.topic)).toEqual([
      'approvals.requested',
      'payment.refund',
    ]);
  });

  it('refuses a bad option when the writer is created, naming the field', () => {
    expect(() => createOutbox({ approvalRequests: { topic: '' } })).toThrow(OutboxValidationError);
    expect(() => createOutbox({ approvalRequests: { topic: ' ' } })).toThrow(
      /approvalRequests\.topic/,
    );
    expect(() =>
      createOutbox({
        approvalRequests: { topic: 'a', includePayload: 'yes' as unknown as boolean },
      }),
    ).toThrow(/approvalRequests\.includePayload/);
  });
});
