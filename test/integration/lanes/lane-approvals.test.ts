import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  approveMessages,
  expireApprovals,
  listAwaitingApproval,
  OutboxApprovalError,
  rejectMessages,
} from '../../../src/admin/approvals.js';
import type { OutboxMessage } from '../../../src/core/message.js';
import type { DeadLetterPolicy } from '../../../src/dispatcher/options.js';
import { laneStatus } from '../../../src/lanes/lane-admin.js';
import type { Dispatcher } from '../../../src/dispatcher/dispatcher.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { readLaneEngineStatus } from '../../../src/lanes/lane-engine-status.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { LANE_DECISION_LOCK_CLASS } from '../../../src/sql/lanes.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { pruneOutbox } from '../../../src/retention/prune-outbox.js';
import { createOutbox } from '../../../src/writer/create-outbox.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';

/**
 * Held messages on the lanes engine (migration 027), with the claim engine's semantics
 * (docs/approvals.md; claim-engine tests: test/integration/approvals/).
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

async function write(messages: OutboxMessage[], writer = outbox) {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    const result = await writer.enqueue(fromPg(client), messages);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  } finally {
    client.release();
  }
}

const msg = (aggregateId: string, n: number, extra: Partial<OutboxMessage> = {}) =>
  ({ topic: 'payment.refund', aggregateId, payload: { n }, ...extra }) as OutboxMessage;
const held = (aggregateId: string, n: number, extra: Partial<OutboxMessage> = {}) =>
  msg(aggregateId, n, { requiresApproval: true, ...extra });

function dispatch(deadLetterPolicy: DeadLetterPolicy = 'hold') {
  const publisher = new InMemoryPublisher();
  const dispatcher = createLaneDispatcher({
    executor: fromPg(db.pool),
    publisher,
    pollIntervalMs: 20,
    deadLetterPolicy,
  });
  dispatcher.start();
  running.push(dispatcher);
  const of = (aggregateId: string) =>
    publisher.published
      .filter((m) => m.aggregateId === aggregateId)
      .map((m) => (m.payload as { n: number }).n);
  return { publisher, dispatcher, of };
}

async function waitFor(condition: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > until) throw new Error('condition not reached');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function decision(id: string) {
  const { rows } = await db.pool.query<{
    state: string;
    decided_by: string | null;
    note: string | null;
    decided: boolean;
  }>(
    `SELECT state, decided_by, note, decided_at IS NOT NULL AS decided
       FROM outbox_lane_approvals WHERE id = $1`,
    [id],
  );
  return rows[0];
}

const lanes = { engine: 'lanes' } as const;

describe('lanes engine: held messages', () => {
  it('never publishes a held message before it is approved; the rest flows', async () => {
    const written = await write([held('h-1', 1), msg('h-2', 1), msg('h-3', 1)]);
    expect(written[0]).toMatchObject({ awaitingApproval: true });
    expect(written[1]!.awaitingApproval).toBeUndefined();
    const { publisher, of } = dispatch();
    await waitFor(() => of('h-2').length === 1 && of('h-3').length === 1);
    await sleep(300);
    expect(of('h-1')).toEqual([]);
    const waiting = await listAwaitingApproval(fromPg(db.pool), lanes);
    expect(waiting.map((w) => w.messageId)).toEqual([written[0]!.messageId]);
    expect(waiting[0]).toMatchObject({ id: written[0]!.id, aggregateId: 'h-1', sequence: 1 });
    // By message id (the row id works too: other tests).
    const decided = await approveMessages(fromPg(db.pool), [written[0]!.messageId], {
      by: 'alice',
      note: 'checked',
      ...lanes,
    });
    expect(decided).toEqual([expect.objectContaining({ id: written[0]!.id, state: 'approved' })]);
    await waitFor(() => of('h-1').length === 1);
    expect(publisher.published.find((m) => m.aggregateId === 'h-1')!.id).toBe(
      written[0]!.messageId,
    );
    expect(await decision(written[0]!.id)).toEqual({
      state: 'approved',
      decided_by: 'alice',
      note: 'checked',
      decided: true,
    });
    expect(await listAwaitingApproval(fromPg(db.pool), lanes)).toEqual([]);
  });

  it('an ordered held message holds its aggregate, which goes out in order once approved', async () => {
    const written = await write([msg('o-1', 1), held('o-1', 2), msg('o-1', 3), msg('o-2', 1)]);
    const { of } = dispatch();
    await waitFor(() => of('o-1').length === 1 && of('o-2').length === 1);
    await write([msg('o-1', 4)]);
    await sleep(300);
    expect(of('o-1')).toEqual([1]);
    const status = await laneStatus(fromPg(db.pool));
    expect(status.total.held).toBe(1);
    await approveMessages(fromPg(db.pool), [written[1]!.id], { by: 'bob', ...lanes });
    await waitFor(() => of('o-1').length === 4);
    expect(of('o-1')).toEqual([1, 2, 3, 4]);
  });

  it('approved before the lane read reaches it: due at once, in order', async () => {
    const written = await write([held('a-1', 1), msg('a-1', 2)]);
    await approveMessages(fromPg(db.pool), [written[0]!.id], { by: 'carol', ...lanes });
    const { of } = dispatch();
    await waitFor(() => of('a-1').length === 2);
    expect(of('a-1')).toEqual([1, 2]);
  });

  it('approved before its delay ends: published at the time it was written for, in order', async () => {
    const start = Date.now();
    const written = await write([held('d-1', 1, { delayMs: 1_500 }), msg('d-1', 2)]);
    const { of } = dispatch();
    await sleep(100); // read and parked: held
    await approveMessages(fromPg(db.pool), [written[0]!.id], { by: 'dee', ...lanes });
    await sleep(200);
    expect(of('d-1')).toEqual([]);
    await waitFor(() => of('d-1').length === 2);
    expect(Date.now() - start).toBeGreaterThanOrEqual(1_500);
    expect(of('d-1')).toEqual([1, 2]);
    const waiting = await db.pool.query<{ late: boolean }>(
      `SELECT available_at > requested_at + interval '1400 ms' AS late
         FROM outbox_lane_approvals WHERE id = $1`,
      [written[0]!.id],
    );
    expect(waiting.rows[0]!.late).toBe(true);
  });

  it('an approve and a reject racing on one message: exactly one wins', async () => {
    for (let round = 0; round < 5; round++) {
      const [m] = await write([held(`race-${round}`, 1)]);
      const outcomes = await Promise.allSettled([
        approveMessages(fromPg(db.pool), [m!.id], { by: 'a', ...lanes }),
        rejectMessages(fromPg(db.pool), [m!.messageId], { by: 'r', reason: 'no', ...lanes }),
      ]);
      expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
      const lost = outcomes.find((o) => o.status === 'rejected') as PromiseRejectedResult;
      expect(lost.reason).toBeInstanceOf(OutboxApprovalError);
      const state = (await decision(m!.id))!.state;
      expect(state).toBe(outcomes[0]!.status === 'fulfilled' ? 'approved' : 'rejected');
    }
  });

  it('an unordered held message holds nothing', async () => {
    const written = await write([held('u-1', 1, { ordered: false }), msg('u-1', 2)]);
    const { of } = dispatch();
    await waitFor(() => of('u-1').length === 1);
    expect(of('u-1')).toEqual([2]);
    await approveMessages(fromPg(db.pool), [written[0]!.id], { by: 'dan', ...lanes });
    await waitFor(() => of('u-1').length === 2);
    expect(of('u-1')).toEqual([2, 1]);
  });

  it('rejected under hold: never published, and its aggregate stays blocked', async () => {
    const written = await write([held('rh-1', 1), msg('rh-1', 2), msg('rh-2', 1)]);
    const { of } = dispatch();
    await waitFor(() => of('rh-2').length === 1);
    const rejectedBefore = (await readLaneEngineStatus(fromPg(db.pool))).rejected;
    await rejectMessages(fromPg(db.pool), [written[0]!.id], {
      by: 'erin',
      reason: 'duplicate refund',
      ...lanes,
    });
    await write([msg('rh-1', 3)]);
    await sleep(500);
    expect(of('rh-1')).toEqual([]);
    expect(await decision(written[0]!.id)).toMatchObject({
      state: 'rejected',
      decided_by: 'erin',
      note: 'duplicate refund',
    });
    const status = await readLaneEngineStatus(fromPg(db.pool));
    expect(status.rejected).toBe(rejectedBefore + 1);
  });

  it('rejected under skip: never published, its aggregate goes on (parked or not yet read)', async () => {
    const parked = await write([held('rs-1', 1), msg('rs-1', 2)]);
    const { of } = dispatch('skip');
    await sleep(300);
    expect(of('rs-1')).toEqual([]);
    await rejectMessages(fromPg(db.pool), [parked[0]!.messageId], {
      by: 'frank',
      reason: 'no',
      deadLetterPolicy: 'skip',
      ...lanes,
    });
    await waitFor(() => of('rs-1').length === 1);
    expect(of('rs-1')).toEqual([2]);
    // Rejected before the read reaches it.
    const early = await write([held('rs-2', 1), msg('rs-2', 2)]);
    await running[0]!.stop();
    await rejectMessages(fromPg(db.pool), [early[0]!.id], {
      by: 'frank',
      reason: 'no',
      deadLetterPolicy: 'skip',
      ...lanes,
    });
    const next = dispatch('skip');
    await waitFor(() => next.of('rs-2').length === 1);
    await sleep(200);
    expect(next.of('rs-2')).toEqual([2]);
    expect([...of('rs-2'), ...of('rs-1')]).toEqual([2]);
  });

  it('expires undecided: treated as rejected under the dispatcher policy, or approved on expiry', async () => {
    const written = await write([
      held('e-1', 1, { approvalExpiresInMs: 50 }),
      msg('e-1', 2),
      held('e-2', 1, { approvalExpiresInMs: 50, approvalOnExpiry: 'approve' }),
      msg('e-2', 2),
    ]);
    await sleep(100);
    // Overdue: expired for everyone already, before any sweep.
    await expect(
      approveMessages(fromPg(db.pool), [written[0]!.id], { by: 'gina', ...lanes }),
    ).rejects.toMatchObject({ problems: [expect.objectContaining({ reason: 'expired' })] });
    expect((await readLaneEngineStatus(fromPg(db.pool))).expired).toBeGreaterThanOrEqual(2);
    const { of } = dispatch('skip'); // its first look sweeps
    await waitFor(() => of('e-1').length === 1 && of('e-2').length === 2);
    expect(of('e-1')).toEqual([2]);
    expect(of('e-2')).toEqual([1, 2]);
    expect(await decision(written[0]!.id)).toMatchObject({
      state: 'expired',
      decided_by: 'expiry',
    });
    expect(await decision(written[2]!.id)).toMatchObject({
      state: 'approved',
      decided_by: 'expiry',
    });
  });

  it('expiry under hold keeps the aggregate blocked: the sweep from code takes the policy, the read applies it', async () => {
    const written = await write([held('eh-1', 1, { approvalExpiresInMs: 50 }), msg('eh-1', 2)]);
    await sleep(100);
    // Swept before any lane read met it (no dispatcher runs yet): the read applies the decision.
    const swept = await expireApprovals(fromPg(db.pool), { deadLetterPolicy: 'hold', ...lanes });
    expect(swept).toEqual(
      expect.arrayContaining([expect.objectContaining({ id: written[0]!.id, state: 'expired' })]),
    );
    const { of } = dispatch('skip'); // the policy the expiry was decided under counts
    await sleep(400);
    expect(of('eh-1')).toEqual([]);
    const parked = await db.pool.query(
      `SELECT 1 FROM outbox_lane_parked WHERE aggregate_id = 'eh-1'`,
    );
    expect(parked.rows).toHaveLength(2);
  });

  it('bad input: unknown ids, twice decided, not held, all or nothing; nothing written', async () => {
    const written = await write([held('b-1', 1), held('b-2', 1), msg('b-3', 1)]);
    const api = fromPg(db.pool);
    const snapshot = () =>
      db.pool
        .query(`SELECT id, state, decided_by FROM outbox_lane_approvals ORDER BY id`)
        .then((r) => JSON.stringify(r.rows));
    const before = await snapshot();
    await expect(
      approveMessages(api, [written[0]!.id, '999999999'], { by: 'h', ...lanes }),
    ).rejects.toMatchObject({
      name: 'OutboxApprovalError',
      problems: [expect.objectContaining({ ref: '999999999', reason: 'not-found' })],
    });
    await expect(
      approveMessages(api, ['0190a5c8-0000-7000-8000-000000000000'], { by: 'h', ...lanes }),
    ).rejects.toThrow(/no such message/);
    await expect(
      approveMessages(api, [written[2]!.id], { by: 'h', ...lanes }),
    ).rejects.toMatchObject({ problems: [expect.objectContaining({ reason: 'not-held' })] });
    await expect(approveMessages(api, ['x'], { by: 'h', ...lanes })).rejects.toThrow(
      /neither a row id/,
    );
    await expect(
      rejectMessages(api, [written[0]!.id], { by: 'h', reason: '', ...lanes }),
    ).rejects.toThrow(/reason/);
    expect(await snapshot()).toBe(before);
    await rejectMessages(api, [written[1]!.id], { by: 'ivy', reason: 'no', ...lanes });
    const twice = await approveMessages(api, [written[0]!.id, written[1]!.id], {
      by: 'h',
      ...lanes,
    }).catch((e: unknown) => e);
    expect(twice).toBeInstanceOf(OutboxApprovalError);
    expect((twice as OutboxApprovalError).message).toMatch(/already rejected by ivy/);
    expect(await decision(written[0]!.id)).toMatchObject({ state: 'awaiting', decided: false });
    await expect(
      rejectMessages(api, [written[1]!.id], { by: 'h', reason: 'again', ...lanes }),
    ).rejects.toMatchObject({ problems: [expect.objectContaining({ reason: 'decided' })] });
  });

  it('approval requests: one unordered lanes message per held one, published at once', async () => {
    const writer = createOutbox({
      engine: 'lanes',
      approvalRequests: { topic: 'approvals.requested' },
    });
    const written = await write(
      [held('r-1', 1, { approvalRequestedBy: 'tool refund' }), msg('r-1', 2)],
      writer,
    );
    expect(written[0]!.approvalRequestId).toMatch(/^[0-9a-f-]{36}$/);
    expect(written[1]!.approvalRequestId).toBeUndefined();
    const { publisher, of } = dispatch();
    await waitFor(() => publisher.published.some((m) => m.topic === 'approvals.requested'));
    const request = publisher.published.find((m) => m.topic === 'approvals.requested')!;
    expect(request.id).toBe(written[0]!.approvalRequestId);
    expect(request.aggregateId).toBe('approval:r-1');
    expect(request.payload).toMatchObject({
      messageId: written[0]!.messageId,
      topic: 'payment.refund',
      aggregateId: 'r-1',
      sequence: 1,
      requestedBy: 'tool refund',
      onExpiry: 'reject',
      payload: { n: 1 },
    });
    expect(typeof (request.payload as { expiresAt: unknown }).expiresAt).toBe('string');
    expect(of('r-1')).toEqual([]);
  });

  it('a decision holding a lane: the read leaves that lane until it is done, others flow', async () => {
    const lane = async (aggregateId: string) =>
      (await db.pool.query<{ l: number }>('SELECT outbox_lane_of($1) AS l', [aggregateId])).rows[0]!
        .l;
    const x = 'lk-x';
    let y = '';
    for (let n = 0; !y; n++) if ((await lane(`lk-y-${n}`)) === (await lane(x))) y = `lk-y-${n}`;
    let other = '';
    for (let n = 0; !other; n++)
      if ((await lane(`lk-o-${n}`)) !== (await lane(x))) other = `lk-o-${n}`;
    await write([held(x, 1), msg(x, 2), msg(y, 1), msg(other, 1)]);
    // What a decision on that lane holds while it changes the lane's parked rows.
    const decision = await db.pool.connect();
    try {
      await decision.query('BEGIN');
      await decision.query('SELECT pg_advisory_xact_lock($1, $2)', [
        LANE_DECISION_LOCK_CLASS,
        await lane(x),
      ]);
      const { of } = dispatch();
      await waitFor(() => of(other).length === 1);
      await sleep(300);
      expect(of(y)).toEqual([]);
      const parked = await db.pool.query(
        `SELECT 1 FROM outbox_lane_parked WHERE aggregate_id = $1`,
        [x],
      );
      expect(parked.rows).toHaveLength(0);
      await decision.query('COMMIT');
      await waitFor(() => of(y).length === 1);
      expect(of(x)).toEqual([]);
    } finally {
      await decision.query('ROLLBACK').catch(() => undefined);
      decision.release();
    }
  });

  it('counts what waits as the claim engine does, not as pending', async () => {
    const status = await readLaneEngineStatus(fromPg(db.pool));
    const waiting = await listAwaitingApproval(fromPg(db.pool), lanes);
    expect(status.awaitingApproval).toBe(waiting.length);
    expect(status.awaitingApproval).toBeGreaterThan(0);
    expect(status.oldestAwaitingApprovalAgeSeconds).toBeGreaterThan(0);
  });

  it('retention deletes the decisions of messages it deleted, never of a message still kept', async () => {
    const written = await write([held('p-1', 1), msg('p-1', 2), held('p-2', 1)]);
    await rejectMessages(fromPg(db.pool), [written[0]!.id], {
      by: 'kim',
      reason: 'no',
      deadLetterPolicy: 'skip',
      ...lanes,
    });
    const { of, dispatcher } = dispatch('skip');
    await waitFor(() => of('p-1').length === 1);
    await dispatcher.stop(); // writes its cursors
    const decisions = () =>
      db.pool
        .query<{ id: string }>('SELECT id::text AS id FROM outbox_lane_approvals ORDER BY id')
        .then((r) => r.rows.map((row) => row.id));
    const before = await decisions();
    expect(before).toContain(written[0]!.id);
    await pruneOutbox(fromPg(db.pool), { olderThanMs: 0 });
    const after = await decisions();
    expect(after).not.toContain(written[0]!.id);
    // Still awaiting (parked, its message kept): kept. So is every decision whose message is.
    expect(after).toContain(written[2]!.id);
    const kept = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM outbox_lane_approvals a
       WHERE NOT EXISTS (SELECT 1 FROM outbox_lane_messages m WHERE m.lane = a.lane AND m.id = a.id)`,
    );
    expect(kept.rows[0]!.n).toBe(0);
    // Rejected under hold earlier: parked for good, its message kept, and its decision with it.
    const blocked = await db.pool.query(
      `SELECT 1 FROM outbox_lane_approvals a
       JOIN outbox_lane_messages m ON m.lane = a.lane AND m.id = a.id
       WHERE m.aggregate_id = 'rh-1' AND a.state = 'rejected'`,
    );
    expect(blocked.rows).toHaveLength(1);
  });
});
