/**
 * Issue 28, item 3: a held message carries what its deadline does (`approvalOnExpiry`), and a
 * running dispatcher applies it without a person: `approve` publishes it (decided by `expiry`),
 * `reject` (the default) expires it, never published.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createDispatcher,
  fromPg,
  InMemoryPublisher,
  OutboxValidationError,
  PgOutboxStore,
  readEffectStatus,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted } from '../../helpers/outbox-fixtures.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

const decisionOf = async (messageId: string) =>
  (
    await db.pool.query<{
      approval_state: string;
      approval_decided_by: string | null;
      approval_note: string | null;
      dispatched: boolean;
    }>(
      `SELECT approval_state, approval_decided_by, approval_note, dispatched_at IS NOT NULL AS dispatched
       FROM outbox_messages WHERE message_id = $1`,
      [messageId],
    )
  ).rows[0]!;

describe('approval deadlines with a policy', () => {
  it('a running dispatcher approves the approve-on-expiry message at its deadline and expires the other', async () => {
    const [approveLater, follower, rejectLater] = await enqueueCommitted(db.pool, [
      {
        topic: 'mail.digest',
        aggregateId: 'user:1',
        payload: {},
        requiresApproval: true,
        approvalOnExpiry: 'approve',
      },
      { topic: 'mail.send', aggregateId: 'user:1', payload: {} },
      { topic: 'payment.refund', aggregateId: 'order:1', payload: {}, requiresApproval: true },
    ]);
    const publisher = new InMemoryPublisher();
    const dispatcher = createDispatcher({
      store: new PgOutboxStore(fromPg(db.pool), { approvalSweepIntervalMs: 20 }),
      publisher,
      pollIntervalMs: 20,
    });
    dispatcher.start();
    try {
      // A full pass over the backlog: nothing held goes out, the follower waits behind its head.
      await dispatcher.onIdle();
      expect(publisher.published).toEqual([]);
      // Both deadlines pass (moved, not waited for).
      await db.pool.query(
        `UPDATE outbox SET approval_expires_at = now() - interval '1 second' WHERE approval_state = 'awaiting'`,
      );
      await until(() => publisher.published.length === 2);
    } finally {
      await dispatcher.stop();
    }
    expect(publisher.published.map((m) => m.topic)).toEqual(['mail.digest', 'mail.send']);
    expect(await decisionOf(approveLater!.messageId)).toMatchObject({
      approval_state: 'approved',
      approval_decided_by: 'expiry',
      approval_note: expect.stringMatching(/^approved on expiry: no decision before /),
      dispatched: true,
    });
    expect((await decisionOf(follower!.messageId)).dispatched).toBe(true);
    expect(await decisionOf(rejectLater!.messageId)).toMatchObject({
      approval_state: 'expired',
      approval_decided_by: 'expiry',
      dispatched: false,
    });
  });

  it('overdue but not swept yet, an approve-on-expiry message reads pending, not expired', async () => {
    const [message] = await enqueueCommitted(db.pool, [
      {
        topic: 'mail.digest',
        aggregateId: 'user:2',
        payload: {},
        requiresApproval: true,
        approvalOnExpiry: 'approve',
      },
    ]);
    await db.pool.query(
      `UPDATE outbox SET approval_expires_at = now() - interval '1 second' WHERE message_id = $1`,
      [message!.messageId],
    );
    const { effects } = await readEffectStatus(fromPg(db.pool), {
      messageIds: [message!.messageId],
    });
    expect(effects[0]!.state).toBe('pending');
  });

  it('the policy is checked: only with requiresApproval, only reject or approve', async () => {
    await expect(
      enqueueCommitted(db.pool, [
        { topic: 't', aggregateId: 'a', payload: {}, approvalOnExpiry: 'approve' },
      ]),
    ).rejects.toThrow(/approvalOnExpiry: only applies to a message with requiresApproval/);
    await expect(
      enqueueCommitted(db.pool, [
        {
          topic: 't',
          aggregateId: 'a',
          payload: {},
          requiresApproval: true,
          approvalOnExpiry: 'ignore' as 'approve',
        },
      ]),
    ).rejects.toBeInstanceOf(OutboxValidationError);
  });
});

async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !condition(); i++)
    await new Promise((resolve) => setTimeout(resolve, 20));
  if (!condition()) throw new Error('condition not reached');
}
