/**
 * Issue 20, deciding: approve → published once; reject → kept, never published, its successors
 * per the dead-letter policy; deciding twice is an error that changes nothing; an approve and a
 * reject of the same message racing: exactly one wins. Through the API and the CLI.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  approveMessages,
  createOutbox,
  fromPg,
  listAwaitingApproval,
  OutboxApprovalError,
  PgOutboxStore,
  rejectMessages,
  type EnqueuedMessage,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
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
  await resetOutbox(db.pool);
  receiver.envelopes.length = 0;
});

const executor = () => fromPg(db.pool);
const cli = (...args: string[]) => runCli([...args, '--database-url', db.url]);
const dispatchOnce = (...flags: string[]) =>
  cli('dispatch', '--once', '--publisher', receiver.url, ...flags);
const published = () => receiver.envelopes.map((e) => `${e.aggregateId}#${e.sequence}`);
const audit = async (id: string) =>
  (
    await db.pool.query<{
      approval_state: string;
      approval_decided_by: string;
      approval_note: string | null;
      decided: boolean;
      dead: boolean;
      ordered: boolean;
      ready: boolean;
      dispatched: boolean;
    }>(
      `SELECT approval_state, approval_decided_by, approval_note,
              approval_decided_at IS NOT NULL AS decided, dead_lettered_at IS NOT NULL AS dead,
              ordered, ready, dispatched_at IS NOT NULL AS dispatched
       FROM outbox_messages WHERE id = $1`,
      [id],
    )
  ).rows[0]!;

const refund = (aggregateId: string, extra: object = {}) => ({
  topic: 'payment.refund',
  aggregateId,
  payload: { amount: 50_000 },
  requiresApproval: true,
  ...extra,
});
const mail = (aggregateId: string) => ({ topic: 'mail.send', aggregateId, payload: {} });

describe('approve', () => {
  it('makes a held message due: published once, in order, with who/when/note kept', async () => {
    const [held] = await enqueueCommitted(db.pool, [refund('order:1'), mail('order:1')]);
    await dispatchOnce();
    expect(published()).toEqual([]);

    const decided = await approveMessages(executor(), [held!.id], {
      by: 'alice',
      note: 'checked with the customer',
    });
    expect(decided).toEqual([
      {
        id: held!.id,
        messageId: held!.messageId,
        topic: 'payment.refund',
        aggregateId: 'order:1',
        state: 'approved',
      },
    ]);
    expect(await audit(held!.id)).toMatchObject({
      approval_state: 'approved',
      approval_decided_by: 'alice',
      approval_note: 'checked with the customer',
      decided: true,
    });
    const run = await dispatchOnce();
    expect(run.code, run.stderr).toBe(0);
    await dispatchOnce();
    expect(published()).toEqual(['order:1#1', 'order:1#2']);
    expect(receiver.distinct()).toBeGreaterThanOrEqual(2);
    expect(await audit(held!.id)).toMatchObject({ approval_state: 'approved', dispatched: true });
    // Dispatched, the row lives in the dispatched ring (migration 018): a second decision still
    // finds it and names who decided, by id or by message id, rather than "not found".
    for (const ref of [held!.id, held!.messageId]) {
      const error = (await rejectMessages(executor(), [ref], { by: 'bob', reason: 'late' }).catch(
        (e: unknown) => e,
      )) as OutboxApprovalError;
      expect(error).toBeInstanceOf(OutboxApprovalError);
      expect(error.problems).toEqual([
        expect.objectContaining({ reason: 'decided', state: 'approved', decidedBy: 'alice' }),
      ]);
    }
  });

  it('makes a held head claimable even when its ready flag was left unset', async () => {
    const [held, behind] = await enqueueCommitted(db.pool, [refund('order:20'), mail('order:20')]);
    await db.pool.query(`UPDATE outbox SET ready = false WHERE id = $1`, [held!.id]);
    await approveMessages(executor(), [held!.id], { by: 'alice' });
    expect(await audit(held!.id)).toMatchObject({ ready: true });
    expect(await audit(behind!.id)).toMatchObject({ ready: false }); // still behind it
    await dispatchOnce();
    await dispatchOnce();
    expect(published()).toEqual(['order:20#1', 'order:20#2']);
  });

  it('keeps the delay the message was written with, when it has not passed yet', async () => {
    const [held] = await enqueueCommitted(db.pool, [refund('order:2', { delayMs: 3_600_000 })]);
    await approveMessages(executor(), [held!.messageId], { by: 'alice' });
    const { rows } = await db.pool.query<{ minutes: number }>(
      `SELECT (extract(epoch FROM available_at - now()) / 60)::float8 AS minutes FROM outbox WHERE id = $1`,
      [held!.id],
    );
    expect(rows[0]!.minutes).toBeGreaterThan(55);
    await dispatchOnce();
    expect(published()).toEqual([]);
  });
});

describe('deciding twice, and other refusals, change nothing', () => {
  it('a second decision is an OutboxApprovalError naming who decided; the batch is all or nothing', async () => {
    const [first, second] = await enqueueCommitted(db.pool, [refund('order:3'), refund('order:4')]);
    await approveMessages(executor(), [first!.id], { by: 'alice' });

    for (const attempt of [
      () => approveMessages(executor(), [first!.id, second!.id], { by: 'bob' }),
      () => rejectMessages(executor(), [second!.id, first!.id], { by: 'bob', reason: 'no' }),
    ]) {
      const error = await attempt().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxApprovalError);
      expect((error as OutboxApprovalError).problems).toEqual([
        expect.objectContaining({
          ref: first!.id,
          reason: 'decided',
          state: 'approved',
          decidedBy: 'alice',
        }),
      ]);
      expect((error as Error).message).toMatch(
        /was already approved by alice at .*a decision cannot be changed/,
      );
    }
    // The other message of the refused batch is still waiting, undecided.
    expect(await audit(second!.id)).toMatchObject({ approval_state: 'awaiting', decided: false });
    expect(await audit(first!.id)).toMatchObject({ approval_decided_by: 'alice' });
  });

  it('refuses expired, never-held and unknown messages', async () => {
    const [held, plain] = await enqueueCommitted(db.pool, [refund('order:5'), mail('user:5')]);
    await db.pool.query(
      `UPDATE outbox SET approval_expires_at = now() - interval '1 minute' WHERE id = $1`,
      [held!.id],
    );
    const reasons = async (ids: string[]) =>
      (
        (await approveMessages(executor(), ids, { by: 'a' }).catch(
          (e: unknown) => e,
        )) as OutboxApprovalError
      ).problems.map((p) => p.reason);
    expect(await reasons([held!.id])).toEqual(['expired']);
    expect(await reasons([plain!.id])).toEqual(['not-held']);
    expect(await reasons(['999999'])).toEqual(['not-found']);
    await expect(approveMessages(executor(), ['nope'], { by: 'a' })).rejects.toThrow(
      /neither a row id \(digits\) nor a message id/,
    );
    await expect(approveMessages(executor(), [held!.id], { by: ' ' })).rejects.toThrow(
      /by: is required/,
    );
    await expect(rejectMessages(executor(), [held!.id], { by: 'a', reason: '' })).rejects.toThrow(
      /reason: is required/,
    );
  });
});

describe('reject', () => {
  it('under hold (default): kept, never published, counted; a rejected head blocks its aggregate', async () => {
    const [held] = await enqueueCommitted(db.pool, [
      refund('order:6'),
      mail('order:6'),
      mail('user:6'),
    ]);
    await rejectMessages(executor(), [held!.id], { by: 'carol', reason: 'duplicate refund' });
    expect(await audit(held!.id)).toMatchObject({
      approval_state: 'rejected',
      approval_decided_by: 'carol',
      approval_note: 'duplicate refund',
      dead: true,
      ordered: true,
    });
    await dispatchOnce();
    await dispatchOnce();
    expect(published()).toEqual(['user:6#1']);
    const status = JSON.parse((await cli('status', '--json')).stdout);
    expect(status).toMatchObject({ rejected: 1, deadLetters: 0, awaitingApproval: 0, backlog: 1 });
    expect(status.lastErrors).toEqual([]);
  });

  it('under skip: never published, and the successor goes', async () => {
    const [held] = await enqueueCommitted(db.pool, [
      refund('order:7'),
      mail('order:7'),
      mail('order:7'),
    ]);
    await rejectMessages(executor(), [held!.id], {
      by: 'carol',
      reason: 'wrong amount',
      deadLetterPolicy: 'skip',
    });
    expect(await audit(held!.id)).toMatchObject({
      approval_state: 'rejected',
      dead: true,
      ordered: false,
    });
    await dispatchOnce('--dead-letter-policy', 'skip');
    expect(published()).toEqual(['order:7#2', 'order:7#3']);
  });

  it('under skip behind a predecessor that stays put: nothing is marked early; the successor follows the predecessor', async () => {
    const [before, held, after] = await enqueueCommitted(db.pool, [
      mail('order:8'),
      refund('order:8'),
      mail('order:8'),
    ]);
    // The predecessor is backing off: a claim must not pay a probe for the successor meanwhile.
    await db.pool.query(
      `UPDATE outbox SET available_at = now() + interval '1 hour' WHERE id = $1`,
      [before!.id],
    );
    await rejectMessages(executor(), [held!.id], {
      by: 'c',
      reason: 'r',
      deadLetterPolicy: 'skip',
    });
    expect(await audit(after!.id)).toMatchObject({ ready: false });
    await db.pool.query(`UPDATE outbox SET available_at = now() WHERE id = $1`, [before!.id]);
    await dispatchOnce('--dead-letter-policy', 'skip');
    expect(published()).toEqual(['order:8#1', 'order:8#3']);
  });

  it('under skip behind a predecessor in flight: the successor is marked, and still goes after it', async () => {
    const [before, held, after] = await enqueueCommitted(db.pool, [
      mail('order:9'),
      refund('order:9'),
      mail('order:9'),
    ]);
    const store = new PgOutboxStore(executor());
    const claimed = await store.claim({ owner: 'inflight#1', batchSize: 10, leaseMs: 60_000 });
    expect(claimed.map((m) => m.rowId)).toEqual([before!.id]);
    // A settle of the predecessor may already hold a snapshot in which the refund is still its
    // successor: it would mark the refund, not the mail, so the reject marks the mail itself.
    await rejectMessages(executor(), [held!.id], {
      by: 'c',
      reason: 'r',
      deadLetterPolicy: 'skip',
    });
    expect(await audit(after!.id)).toMatchObject({ ready: true });
    // The mail is ready, but the head check keeps it behind the predecessor in flight.
    expect(await store.claim({ owner: 'early#2', batchSize: 10, leaseMs: 60_000 })).toEqual([]);
    await store.settle('inflight#1', [{ rowId: before!.id, kind: 'published' }], {
      deadLettersBlock: false,
      leaseMs: 60_000,
    });
    const next = await store.claim({ owner: 'next#3', batchSize: 10, leaseMs: 60_000 });
    expect(next.map((m) => m.rowId)).toEqual([after!.id]);
  });

  it('under skip, the last message of its aggregate: waits for a writer mid-transaction, whose message then goes', async () => {
    const [held] = await enqueueCommitted(db.pool, [refund('order:10')]);
    const writer = await db.pool.connect();
    let late: EnqueuedMessage | undefined;
    try {
      await writer.query('BEGIN');
      late = await createOutbox().enqueue(fromPg(writer), mail('order:10'));
      let settled = false;
      const rejecting = rejectMessages(executor(), [held!.id], {
        by: 'c',
        reason: 'r',
        deadLetterPolicy: 'skip',
      }).finally(() => (settled = true));
      await new Promise((resolve) => setTimeout(resolve, 300));
      // The writer holds the aggregate's counter row: the reject defers and retries.
      expect(settled).toBe(false);
      expect(await audit(held!.id)).toMatchObject({ approval_state: 'awaiting' });
      await writer.query('COMMIT');
      await rejecting;
    } finally {
      writer.release();
    }
    // The writer decided "not the head" (the refund was pending); the reject marked it.
    expect(await audit(late!.id)).toMatchObject({ ready: true });
    await dispatchOnce('--dead-letter-policy', 'skip');
    expect(published()).toEqual(['order:10#2']);
  });
});

describe('an approve and a reject of the same message at the same time', () => {
  it('exactly one wins, every time; the other is told who did', async () => {
    const held = await enqueueCommitted(
      db.pool,
      Array.from({ length: 20 }, (_, i) => refund(`race:${i}`)),
    );
    for (const message of held) {
      const results = await Promise.allSettled([
        approveMessages(executor(), [message.id], { by: 'approver' }),
        rejectMessages(executor(), [message.messageId], {
          by: 'rejecter',
          reason: 'no',
          deadLetterPolicy: 'skip',
        }),
      ]);
      const won = results.filter((r) => r.status === 'fulfilled');
      const lost = results.filter((r) => r.status === 'rejected');
      expect(won).toHaveLength(1);
      expect(lost).toHaveLength(1);
      const error = (lost[0] as PromiseRejectedResult).reason as OutboxApprovalError;
      expect(error).toBeInstanceOf(OutboxApprovalError);
      expect(error.problems[0]!.reason).toBe('decided');
      const state = (await audit(message.id)).approval_state;
      const winner = results[0]!.status === 'fulfilled' ? 'approved' : 'rejected';
      expect(state).toBe(winner);
      expect(error.problems[0]!.state).toBe(winner);
    }
  });
});

describe('the CLI', () => {
  it('outbox approvals lists what waits; approve and reject decide; exit codes as the other commands', async () => {
    const [a, b] = await enqueueCommitted(db.pool, [
      refund('order:11', { approvalRequestedBy: 'tool refund_order · idempotency key req-1' }),
      refund('order:12'),
      mail('user:12'),
    ]);
    const listed = await cli('approvals', '--json');
    expect(listed.code, listed.stderr).toBe(0);
    const list = JSON.parse(listed.stdout) as Record<string, unknown>[];
    expect(list.map((m) => m.id)).toEqual([a!.id, b!.id]);
    expect(Object.keys(list[0]!).sort()).toEqual(
      [
        'id',
        'messageId',
        'topic',
        'aggregateId',
        'sequence',
        'ageSeconds',
        'createdAt',
        'expiresAt',
        'availableAt',
        'requestedBy',
        'traceId',
        'tenantId',
        'payloadSummary',
        'payload',
      ].sort(),
    );
    expect(list[0]).toMatchObject({
      topic: 'payment.refund',
      aggregateId: 'order:11',
      requestedBy: 'tool refund_order · idempotency key req-1',
      payloadSummary: '{"amount":50000}',
    });
    const human = await cli('approvals', '--topic', 'payment.*');
    expect(human.stdout).toContain(
      `#${a!.id} ${a!.messageId} payment.refund order:11 seq=1 waiting`,
    );
    expect(human.stdout).toContain('requested by tool refund_order · idempotency key req-1');
    expect(JSON.parse((await cli('approvals', '--json', '--topic', 'mail.*')).stdout)).toEqual([]);

    expect((await cli('approve', a!.id)).code).toBe(2); // --by missing
    expect((await cli('reject', b!.id, '--by', 'ops')).code).toBe(2); // --reason missing
    expect((await cli('approve', '--by', 'ops')).code).toBe(2); // no ids
    expect(
      (await cli('reject', b!.id, '--by', 'ops', '--reason', 'x', '--dead-letter-policy', 'drop'))
        .code,
    ).toBe(2);

    const approved = await cli('approve', a!.id, '--by', 'ops-alice', '--note', 'ok');
    expect(approved.code, approved.stderr).toBe(0);
    expect(approved.stdout).toContain(`approved #${a!.id}`);
    const again = await cli('approve', a!.messageId, '--by', 'ops-bob');
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/nothing was approved: .*already approved by ops-alice/);
    const rejected = await cli(
      'reject',
      b!.messageId,
      '--by',
      'ops-bob',
      '--reason',
      'fraud',
      '--json',
    );
    expect(rejected.code, rejected.stderr).toBe(0);
    expect(JSON.parse(rejected.stdout)).toEqual({
      rejected: [expect.objectContaining({ id: b!.id, state: 'rejected' })],
    });
    expect((await cli('reject', '424242', '--by', 'x', '--reason', 'y')).code).toBe(1);
    expect(await listAwaitingApproval(executor())).toEqual([]);
    expect((await cli('approvals')).stdout).toBe('nothing waits for approval\n');
  });
});
