/**
 * Issue 20, the write and claim side of held messages: a message written with
 * `requiresApproval` is committed with its transaction but never claimed (`outbox dispatch
 * --once` publishes nothing of it, nor what its aggregate has behind it), costs a claim nothing,
 * and expires into a kept, unpublished message — the dispatcher's dead-letter policy deciding
 * what happens to its successors. Unknown message fields are refused with nothing written.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  createOutbox,
  fromPg,
  OutboxValidationError,
  type SqlExecutor,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { explainedClaim, rowsRead } from '../../helpers/explain.js';
import { enqueueCommitted, resetOutbox } from '../../helpers/outbox-fixtures.js';
import { runCli } from '../../helpers/run-cli.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

let db: TestDatabase;
let receiver: WebhookReceiver;
beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startWebhookReceiver();
});
afterAll(async () => {
  await receiver.close();
  await db.drop();
});
beforeEach(async () => {
  await resetOutbox(db.pool, { also: ['outbox_unordered_topics'] });
  receiver.envelopes.length = 0;
});

const dispatchOnce = (...flags: string[]) =>
  runCli(['dispatch', '--once', '--database-url', db.url, '--publisher', receiver.url, ...flags]);
const published = () => receiver.envelopes.map((e) => `${e.aggregateId}#${e.sequence} ${e.topic}`);

interface Row {
  id: string;
  sequence: string;
  topic: string;
  approval_state: string | null;
  approval_expires_at: Date | null;
  approval_requested_by: string | null;
  available_infinite: boolean;
  dispatched: boolean;
  dead: boolean;
  ordered: boolean;
  ready: boolean;
}
const rows = async (aggregateId: string) =>
  (
    await db.pool.query<Row>(
      `SELECT id::text, sequence::text, topic, approval_state, approval_expires_at,
              approval_requested_by, available_at = 'infinity' AS available_infinite,
              dispatched_at IS NOT NULL AS dispatched, dead_lettered_at IS NOT NULL AS dead,
              ordered, ready
       FROM outbox_messages WHERE aggregate_id = $1 ORDER BY sequence`,
      [aggregateId],
    )
  ).rows;

describe('unknown message fields', () => {
  it.each([
    ['requireApproval', 'requiresApproval'],
    ['delayMS', 'delayMs'],
    ['requires_approval', 'requiresApproval'],
    ['aggregateID', 'aggregateId'],
  ])(
    '%s is refused, naming the field and the one meant, and nothing is written',
    async (typo, meant) => {
      const outbox = createOutbox();
      const client = await db.pool.connect();
      try {
        await client.query('BEGIN');
        const error = await outbox
          .enqueue(fromPg(client), [
            { topic: 'mail.send', aggregateId: 'u:1', payload: {} },
            { topic: 'payment.refund', aggregateId: 'order:1', payload: {}, [typo]: true } as never,
          ])
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(OutboxValidationError);
        expect((error as OutboxValidationError).field).toBe(`messages[1].${typo}`);
        expect((error as Error).message).toContain(`did you mean ${meant}?`);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      expect((await db.pool.query('SELECT 1 FROM outbox')).rowCount).toBe(0);
    },
  );

  it('approval options without requiresApproval, and a bad expiry, are refused too', async () => {
    const outbox = createOutbox();
    const noop: SqlExecutor = { query: async () => ({ rows: [] }) };
    const base = { topic: 'payment.refund', aggregateId: 'order:1', payload: {} };
    await expect(outbox.enqueue(noop, { ...base, approvalExpiresInMs: 1000 })).rejects.toThrow(
      /messages\[0\]\.approvalExpiresInMs: only applies to a message with requiresApproval: true/,
    );
    await expect(
      outbox.enqueue(noop, { ...base, requiresApproval: true, approvalExpiresInMs: -5 }),
    ).rejects.toThrow(/approvalExpiresInMs: must be a number of milliseconds > 0/);
    await expect(
      outbox.enqueue(noop, { ...base, requiresApproval: 'yes' as unknown as boolean }),
    ).rejects.toThrow(/requiresApproval: must be a boolean/);
  });
});

describe('a held message', () => {
  it('is committed, reported held, and not published by dispatch --once — nor what its aggregate has behind it', async () => {
    const [charge, refund, receipt, mail] = await enqueueCommitted(db.pool, [
      { topic: 'payment.charge', aggregateId: 'order:1', payload: { amount: 50_000 } },
      {
        topic: 'payment.refund',
        aggregateId: 'order:1',
        payload: { amount: 50_000 },
        requiresApproval: true,
        approvalRequestedBy: 'support ticket 7',
      },
      { topic: 'mail.send', aggregateId: 'order:1', payload: { template: 'refunded' } },
      { topic: 'mail.send', aggregateId: 'user:1', payload: { template: 'welcome' } },
    ]);
    expect(charge).not.toHaveProperty('awaitingApproval');
    expect(refund).toMatchObject({ topic: 'payment.refund', awaitingApproval: true });
    expect(receipt!.awaitingApproval).toBeUndefined();
    expect(mail!.awaitingApproval).toBeUndefined();

    const [, held] = await rows('order:1');
    expect(held).toMatchObject({
      approval_state: 'awaiting',
      approval_requested_by: 'support ticket 7',
      available_infinite: true,
    });
    const created = (await db.pool.query<{ now: Date }>('SELECT now()')).rows[0]!.now;
    const weekMs = held!.approval_expires_at!.getTime() - created.getTime();
    expect(Math.abs(weekMs - 7 * 86_400_000)).toBeLessThan(60_000);

    const run = await dispatchOnce();
    expect(run.code, run.stderr).toBe(0);
    expect(published().sort()).toEqual(['order:1#1 payment.charge', 'user:1#1 mail.send']);
    // A second pass (the held head is ready now, its predecessor gone) still publishes nothing.
    await dispatchOnce();
    expect(published()).toHaveLength(2);
    // 1 is in the dispatched log (never ready there), the held 2 is the head, 3 waits behind it.
    expect((await rows('order:1')).map((r) => [r.sequence, r.dispatched, r.ready])).toEqual([
      ['1', true, false],
      ['2', false, true],
      ['3', false, false],
    ]);

    const status = JSON.parse(
      (await runCli(['status', '--json', '--database-url', db.url])).stdout,
    );
    expect(status).toMatchObject({
      backlog: 1, // the mail behind the held refund; the refund itself is not backlog
      scheduled: 0,
      deadLetters: 0,
      awaitingApproval: 1,
      rejected: 0,
      expired: 0,
    });
    expect(status.oldestAwaitingApprovalAgeSeconds).toBeGreaterThanOrEqual(0);
  });

  it('can be written by plain SQL naming approval_state; any other state at insert is refused', async () => {
    await db.pool.query(
      `INSERT INTO outbox (aggregate_id, topic, payload, approval_state, approval_expires_at)
       VALUES ('order:2', 'payment.refund', '{"amount": 90000}', 'awaiting', now() + interval '1 day')`,
    );
    const [held] = await rows('order:2');
    expect(held).toMatchObject({ approval_state: 'awaiting', available_infinite: true });
    await expect(
      db.pool.query(
        `INSERT INTO outbox (aggregate_id, topic, payload, approval_state)
         VALUES ('order:3', 'payment.refund', '{}', 'approved')`,
      ),
    ).rejects.toThrow(/approval_state 'awaiting' \(held\) or NULL, not 'approved'/);
    await dispatchOnce();
    expect(published()).toEqual([]);
  });

  it('unordered, it holds back nothing else of its aggregate', async () => {
    await enqueueCommitted(db.pool, [
      {
        topic: 'mail.send',
        aggregateId: 'u:9',
        payload: {},
        ordered: false,
        requiresApproval: true,
      },
      { topic: 'mail.send', aggregateId: 'u:9', payload: { n: 2 } },
    ]);
    await dispatchOnce();
    expect(published()).toEqual(['u:9#2 mail.send']);
  });
});

describe('expiry, applied by the dispatchers before a claim', () => {
  const expireNow = (aggregateId: string) =>
    db.pool.query(
      `UPDATE outbox SET approval_expires_at = now() - interval '1 second'
       WHERE aggregate_id = $1 AND approval_state = 'awaiting'`,
      [aggregateId],
    );

  it('under hold (the default): expired, kept, never published, and its successors wait', async () => {
    await enqueueCommitted(db.pool, [
      { topic: 'payment.refund', aggregateId: 'order:5', payload: {}, requiresApproval: true },
      { topic: 'mail.send', aggregateId: 'order:5', payload: {} },
    ]);
    await expireNow('order:5');
    const run = await dispatchOnce();
    expect(run.code, run.stderr).toBe(0);
    expect(published()).toEqual([]);
    const [expired, mail] = await rows('order:5');
    expect(expired).toMatchObject({ approval_state: 'expired', dead: true, ordered: true });
    expect(mail).toMatchObject({ dispatched: false, dead: false });
    const status = JSON.parse(
      (await runCli(['status', '--json', '--database-url', db.url])).stdout,
    );
    expect(status).toMatchObject({ expired: 1, awaitingApproval: 0, deadLetters: 0, backlog: 1 });
    // Not a dead letter: never listed for replay, and replaying it by id does nothing.
    expect(
      JSON.parse((await runCli(['dead', 'list', '--json', '--database-url', db.url])).stdout),
    ).toEqual([]);
    const replay = await runCli(['replay', expired!.id, '--database-url', db.url]);
    expect(replay.code).toBe(1);
    await dispatchOnce();
    expect(published()).toEqual([]);
  });

  it('under skip: expired, never published, and the successor goes', async () => {
    await enqueueCommitted(db.pool, [
      { topic: 'payment.refund', aggregateId: 'order:6', payload: {}, requiresApproval: true },
      { topic: 'mail.send', aggregateId: 'order:6', payload: {} },
      { topic: 'mail.send', aggregateId: 'order:6', payload: {} },
    ]);
    await expireNow('order:6');
    const run = await dispatchOnce('--dead-letter-policy', 'skip');
    expect(run.code, run.stderr).toBe(0);
    expect(published()).toEqual(['order:6#2 mail.send', 'order:6#3 mail.send']);
    expect((await rows('order:6'))[0]).toMatchObject({
      approval_state: 'expired',
      dead: true,
      ordered: false,
      dispatched: false,
    });
  });

  it('an overdue message not yet swept already counts as expired', async () => {
    await enqueueCommitted(db.pool, [
      { topic: 'payment.refund', aggregateId: 'order:7', payload: {}, requiresApproval: true },
    ]);
    await expireNow('order:7');
    const status = JSON.parse(
      (await runCli(['status', '--json', '--database-url', db.url])).stdout,
    );
    expect(status).toMatchObject({ awaitingApproval: 0, expired: 1 });
  });

  it('an overdue approve-on-expiry message not yet swept still counts as waiting, not expired', async () => {
    const status = async () =>
      JSON.parse((await runCli(['status', '--json', '--database-url', db.url])).stdout) as {
        awaitingApproval: number;
        expired: number;
      };
    await enqueueCommitted(db.pool, [
      {
        topic: 'mail.digest',
        aggregateId: 'order:8',
        payload: {},
        requiresApproval: true,
        approvalOnExpiry: 'approve',
      },
    ]);
    const before = await status();
    await expireNow('order:8');
    // The sweep will approve it: until then it is what it was, a message waiting.
    expect(await status()).toMatchObject({
      awaitingApproval: before.awaitingApproval,
      expired: before.expired,
    });
  });
});

describe('claim cost', () => {
  it('2,000 held heads and a held head with 2,000 behind it cost a claim nothing', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(
        `INSERT INTO outbox (aggregate_id, topic, payload, approval_state)
         SELECT 'held-' || g, 'payment.refund', '{}'::jsonb, 'awaiting' FROM generate_series(1, 2000) g`,
      );
      await client.query(
        `INSERT INTO outbox (aggregate_id, topic, payload, approval_state)
         VALUES ('deep', 'payment.refund', '{}'::jsonb, 'awaiting')`,
      );
      await client.query(
        `INSERT INTO outbox (aggregate_id, topic, payload)
         SELECT 'deep', 'mail.send', '{}'::jsonb FROM generate_series(1, 2000)`,
      );
      await client.query(
        `INSERT INTO outbox (aggregate_id, topic, payload)
         SELECT 'due-' || g, 'payment.charge', '{}'::jsonb FROM generate_series(1, 50) g`,
      );
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    await db.pool.query('ANALYZE outbox');

    const { plan, claimed } = await explainedClaim(db.pool, {
      owner: 'cost#1',
      batchSize: 200,
      leaseMs: 30_000,
    });
    expect(claimed).toHaveLength(50);
    expect(claimed.every((m) => m.aggregateId.startsWith('due-'))).toBe(true);
    // The 50 due heads, their probes and leases: nothing of the 4,001 held or blocked rows.
    expect(rowsRead(plan)).toBeLessThan(400);
  });
});
