import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../../src/core/errors.js';
import type { OutboxMessage } from '../../../src/core/message.js';
import type { DeadLetterPolicy } from '../../../src/dispatcher/options.js';
import {
  laneStatus,
  listLaneDeadLetters,
  replayLaneDeadLetters,
} from '../../../src/lanes/lane-admin.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { laneStatusSql } from '../../../src/sql/lane-admin.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';
import { rowsRead, type PlanNode } from '../../helpers/explain.js';

const NO_BACKOFF = { baseMs: 0, maxMs: 0, jitterMs: 0 };
let db: TestDatabase;

beforeEach(async () => {
  db = await createTestDatabase();
});
afterEach(async () => {
  await db.drop();
});

const write = (messages: readonly OutboxMessage[]) => enqueueLanes(db.pool, messages);

const charge = (aggregateId: string, n: number): OutboxMessage => ({
  topic: 'payment.charge',
  aggregateId,
  payload: { n },
});

/** A publisher that refuses `poison` while `broken()`, and a drain of the lanes with it. */
function failing(poison: () => string | undefined) {
  const publisher = new InMemoryPublisher({
    inject: (m) =>
      m.id === poison() ? { status: 'retryable', error: 'card processor timed out' } : undefined,
  });
  const drain = (deadLetterPolicy: DeadLetterPolicy = 'hold') =>
    createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher,
      maxAttempts: 2,
      backoff: NO_BACKOFF,
      deadLetterPolicy,
    }).drain();
  return { publisher, drain };
}

describe('lanes engine: admin', () => {
  it('lists a dead letter with its message, replays it by message id, and it goes out before its successor (hold)', async () => {
    const [head, next] = await write([charge('a', 1), charge('a', 2)]);
    await write([charge('b', 1)]);
    let poison: string | undefined = head!.messageId;
    const { publisher, drain } = failing(() => poison);
    expect(await drain()).toMatchObject({ deadLettered: 1, published: 1 });

    const dead = await listLaneDeadLetters(fromPg(db.pool));
    const { rows } = await db.pool.query<{ lane: number; id: string }>(
      'SELECT lane, id::text AS id FROM outbox_lane_messages WHERE message_id = $1',
      [head!.messageId],
    );
    expect(dead).toEqual([
      {
        id: `${rows[0]!.lane}:${rows[0]!.id}`,
        messageId: head!.messageId,
        topic: 'payment.charge',
        aggregateId: 'a',
        sequence: 1,
        attempts: 2,
        lastError: 'card processor timed out',
        createdAt: expect.any(Date),
        deadLetteredAt: expect.any(Date),
        payload: { n: 1 },
        blocking: true,
      },
    ]);
    expect(await listLaneDeadLetters(fromPg(db.pool), { topic: 'mail.*' })).toEqual([]);
    expect((await laneStatus(fromPg(db.pool))).total).toMatchObject({
      backlog: 0,
      parked: 1, // a:2, behind its dead head
      retrying: 0,
      deadLetters: 1,
    });

    // An id that is not a dead letter is left alone; a malformed one is refused.
    expect(await replayLaneDeadLetters(fromPg(db.pool), { messageIds: [next!.messageId] })).toEqual(
      [],
    );
    await expect(
      replayLaneDeadLetters(fromPg(db.pool), { messageIds: ['12'] }),
    ).rejects.toBeInstanceOf(OutboxValidationError);
    await expect(replayLaneDeadLetters(fromPg(db.pool), { messageIds: [] })).rejects.toBeInstanceOf(
      OutboxValidationError,
    );

    const replayed = await replayLaneDeadLetters(fromPg(db.pool), {
      messageIds: [head!.messageId.toUpperCase()],
    });
    expect(replayed).toEqual([
      { id: dead[0]!.id, messageId: head!.messageId, topic: 'payment.charge' },
    ]);
    expect((await laneStatus(fromPg(db.pool))).total).toMatchObject({
      parked: 1,
      retrying: 1,
      deadLetters: 0,
    });
    poison = undefined;
    await drain();
    expect(publisher.published.filter((m) => m.aggregateId === 'a').map((m) => m.id)).toEqual([
      head!.messageId,
      next!.messageId,
    ]);
    expect(await listLaneDeadLetters(fromPg(db.pool))).toEqual([]);
    expect(
      Number((await db.pool.query('SELECT count(*) FROM outbox_lane_parked')).rows[0].count),
    ).toBe(0);
  });

  it('under skip, a replayed dead letter is published on its own and its aggregate does not park again', async () => {
    const [head] = await write([charge('a', 1), charge('a', 2)]);
    let poison: string | undefined = head!.messageId;
    const { publisher, drain } = failing(() => poison);
    expect(await drain('skip')).toMatchObject({ deadLettered: 1, published: 1 });
    const state = await db.pool.query<{ head: boolean; blocks: boolean }>(
      'SELECT head, blocks FROM outbox_lane_parked',
    );
    expect(state.rows).toEqual([{ head: false, blocks: false }]);

    poison = undefined;
    expect(await replayLaneDeadLetters(fromPg(db.pool))).toHaveLength(1);
    // Left not blocking: a new message of the aggregate flows through the cursor.
    const after = await db.pool.query<{ head: boolean; blocks: boolean }>(
      'SELECT head, blocks FROM outbox_lane_parked',
    );
    expect(after.rows).toEqual([{ head: true, blocks: false }]);
    await write([charge('a', 3)]);
    await drain('skip');
    expect(publisher.published.map((m) => m.sequence).sort()).toEqual([1, 2, 3]);
    expect((await laneStatus(fromPg(db.pool))).total).toMatchObject({
      backlog: 0,
      parked: 0,
      retrying: 0,
      deadLetters: 0,
    });
  });

  it('replays every dead letter of a topic when no ids are given', async () => {
    const written = await write([
      charge('a', 1),
      { topic: 'mail.send', aggregateId: 'm', payload: 1 },
    ]);
    const publisher = new InMemoryPublisher({
      inject: () => ({ status: 'permanent', error: 'no such account' }),
    });
    await createLaneDispatcher({ executor: fromPg(db.pool), publisher }).drain();
    expect(await listLaneDeadLetters(fromPg(db.pool))).toHaveLength(2);
    expect(await listLaneDeadLetters(fromPg(db.pool), { limit: 1 })).toHaveLength(1);
    const replayed = await replayLaneDeadLetters(fromPg(db.pool), { topic: 'mail.*' });
    expect(replayed.map((r) => r.messageId)).toEqual([written[1]!.messageId]);
    expect((await listLaneDeadLetters(fromPg(db.pool))).map((d) => d.messageId)).toEqual([
      written[0]!.messageId,
    ]);
  });

  it('shows each lane: backlog after the cursor, owner and lease; reads the backlog, not history', async () => {
    const empty = await laneStatus(fromPg(db.pool));
    expect(empty.lanes).toHaveLength(16);
    expect(empty.total).toEqual({
      backlog: 0,
      oldestBacklogAgeSeconds: 0,
      parked: 0,
      retrying: 0,
      held: 0,
      deadLetters: 0,
      leasedLanes: 0,
      owners: 0,
    });
    for (let t = 0; t < 10; t++)
      await write(Array.from({ length: 100 }, (_, i) => charge(`agg-${i}`, t)));
    const waiting = await laneStatus(fromPg(db.pool));
    expect(waiting.total.backlog).toBe(1_000);
    expect(waiting.total.oldestBacklogAgeSeconds).toBeGreaterThanOrEqual(0);
    const { rows } = await db.pool.query<{ lane: number; n: number }>(
      'SELECT lane, count(*)::int AS n FROM outbox_lane_messages GROUP BY lane ORDER BY lane',
    );
    for (const { lane, n } of rows) expect(waiting.lanes[lane]!.backlog).toBe(n);

    const publisher = new InMemoryPublisher();
    const dispatcher = createLaneDispatcher({
      id: 'the-one',
      executor: fromPg(db.pool),
      publisher,
      pollIntervalMs: 20,
    });
    dispatcher.start();
    await expect.poll(async () => (await laneStatus(fromPg(db.pool))).total.backlog).toBe(0);
    const running = await laneStatus(fromPg(db.pool));
    expect(running.total).toMatchObject({ leasedLanes: 16, owners: 1 });
    expect(running.lanes.every((l) => l.owner === 'the-one' && l.leased)).toBe(true);
    expect(running.lanes.every((l) => l.leaseExpiresAt!.getTime() > Date.now() - 60_000)).toBe(
      true,
    );
    await dispatcher.stop();
    const stopped = await laneStatus(fromPg(db.pool));
    expect(stopped.total).toMatchObject({ backlog: 0, leasedLanes: 0, owners: 0 });

    // 1,000 messages consumed, 5 new: the status reads the 5 and one probe a lane, not the 1,000.
    await write(Array.from({ length: 5 }, (_, i) => charge(`new-${i}`, 0)));
    const explained = await db.pool.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
      `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${laneStatusSql('public')}`,
    );
    const plan = explained.rows[0]!['QUERY PLAN'][0].Plan;
    // Actual Rows is a per-loop average (rounded): all 1,000 read would show as about 62 x 16.
    expect(rowsRead(plan, 'outbox_lane_messages')).toBeLessThanOrEqual(5 * 2);
    expect(JSON.stringify(plan)).not.toMatch(/"Seq Scan"[^}]*"outbox_lane_messages"/);
    expect((await laneStatus(fromPg(db.pool))).total.backlog).toBe(5);
  });
});
