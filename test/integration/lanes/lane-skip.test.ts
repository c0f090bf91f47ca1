import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../../src/core/errors.js';
import type { OutboxMessage } from '../../../src/core/message.js';
import {
  laneStatus,
  listLaneDeadLetters,
  replayLaneDeadLetters,
  skipLaneDeadLetters,
} from '../../../src/lanes/lane-admin.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { LANE_DECISION_LOCK_CLASS } from '../../../src/sql/lanes.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';

/**
 * Skip for a lanes dead letter (migration 030, sql/lane-admin.ts `outbox_lane_skip_dead`): a dead
 * letter that holds its aggregate (`hold`) is given up; it is never published, and its
 * aggregate's later messages go out in order, through a real lane dispatcher.
 */
const NO_BACKOFF = { baseMs: 0, maxMs: 0, jitterMs: 0 };
let db: TestDatabase;
beforeEach(async () => {
  db = await createTestDatabase();
});
afterEach(async () => {
  await db.drop();
});

const charge = (aggregateId: string, n: number): OutboxMessage => ({
  topic: 'payment.charge',
  aggregateId,
  payload: { n },
});
const write = (messages: readonly OutboxMessage[]) => enqueueLanes(db.pool, messages);
const executor = () => fromPg(db.pool);

/** A publisher that refuses `poison` for good, and lane dispatchers (hold, 2 attempts) on it. */
function failing(poison: () => string | undefined) {
  const publisher = new InMemoryPublisher({
    inject: (m) =>
      m.id === poison() ? { status: 'retryable', error: 'card declined for good' } : undefined,
  });
  const dispatcher = (pollIntervalMs = 200) =>
    createLaneDispatcher({
      executor: executor(),
      publisher,
      maxAttempts: 2,
      backoff: NO_BACKOFF,
      deadLetterPolicy: 'hold',
      pollIntervalMs,
    });
  return { publisher, dispatcher };
}

const of = (publisher: InMemoryPublisher, aggregate: string) =>
  publisher.published.filter((m) => m.aggregateId === aggregate).map((m) => m.sequence);

describe('lanes engine: Skip a dead letter', () => {
  it('never publishes it; the rest of its aggregate goes out in order, to a running dispatcher', async () => {
    const written = await write([charge('a', 1), charge('a', 2), charge('a', 3), charge('b', 1)]);
    const poison = written[1]!.messageId;
    const { publisher, dispatcher } = failing(() => poison);
    expect(await dispatcher().drain()).toMatchObject({ deadLettered: 1 });
    // Written after the death: read behind it as the cursor reaches it.
    await write([charge('a', 4), charge('a', 5)]);
    await dispatcher().drain();
    expect(of(publisher, 'a')).toEqual([1]);
    expect(of(publisher, 'b')).toEqual([1]);
    const [dead] = await listLaneDeadLetters(executor());
    expect(dead).toMatchObject({ messageId: poison, blocking: true, sequence: 2 });
    expect((await laneStatus(executor())).total).toMatchObject({ parked: 3, deadLetters: 1 });

    // A running dispatcher finds the aggregate's next message due once skipped, at its next look
    // at the parked messages (its poll cadence, at most a second).
    const running = dispatcher(300);
    running.start();
    try {
      await running.onIdle();
      const skipped = await skipLaneDeadLetters(executor(), {
        messageIds: [poison.toUpperCase()],
      });
      expect(skipped).toEqual([
        { id: dead!.id, messageId: poison, topic: 'payment.charge', aggregateId: 'a' },
      ]);
      for (let i = 0; i < 250 && of(publisher, 'a').length < 4; i++)
        await new Promise((resolve) => setTimeout(resolve, 20));
      expect(of(publisher, 'a')).toEqual([1, 3, 4, 5]);
      // Messages written after the skip are not held either.
      await write([charge('a', 6)]);
      running.wake();
      for (let i = 0; i < 250 && of(publisher, 'a').length < 5; i++)
        await new Promise((resolve) => setTimeout(resolve, 20));
      expect(of(publisher, 'a')).toEqual([1, 3, 4, 5, 6]);
    } finally {
      await running.stop();
    }
    expect(publisher.published.some((m) => m.id === poison)).toBe(false);
    // Still a dead letter (never published), holding nothing; a second skip does nothing.
    expect(await listLaneDeadLetters(executor())).toMatchObject([
      { messageId: poison, blocking: false },
    ]);
    expect((await laneStatus(executor())).total).toMatchObject({
      parked: 0,
      retrying: 0,
      deadLetters: 1,
    });
    expect(await skipLaneDeadLetters(executor(), { messageIds: [poison] })).toEqual([]);
  });

  it('skips only blocking dead letters, refuses malformed ids, and a replay after it publishes the message alone', async () => {
    const written = await write([charge('c', 1), charge('c', 2), charge('d', 1)]);
    let poison: string | undefined = written[0]!.messageId;
    const { publisher, dispatcher } = failing(() => poison);
    await dispatcher().drain();
    // Not a dead letter; not a UUID; empty.
    expect(await skipLaneDeadLetters(executor(), { messageIds: [written[2]!.messageId] })).toEqual(
      [],
    );
    await expect(skipLaneDeadLetters(executor(), { messageIds: ['3:12'] })).rejects.toBeInstanceOf(
      OutboxValidationError,
    );
    await expect(skipLaneDeadLetters(executor(), { messageIds: [] })).rejects.toBeInstanceOf(
      OutboxValidationError,
    );
    expect(of(publisher, 'c')).toEqual([]);

    expect(await skipLaneDeadLetters(executor(), { messageIds: [poison] })).toHaveLength(1);
    await dispatcher().drain();
    expect(of(publisher, 'c')).toEqual([2]);
    // Replayed after the skip: published on its own, after its successor (the order Skip chose).
    poison = undefined;
    expect(
      await replayLaneDeadLetters(executor(), { messageIds: [written[0]!.messageId] }),
    ).toHaveLength(1);
    await dispatcher().drain();
    expect(of(publisher, 'c')).toEqual([2, 1]);
    expect((await laneStatus(executor())).total).toMatchObject({ parked: 0, deadLetters: 0 });
  });
  it('waits for a lane read that parks behind the dead letter, and makes what it parked head', async () => {
    const [first] = await write([charge('e', 1)]);
    const { publisher, dispatcher } = failing(() => first!.messageId);
    await dispatcher().drain();
    const [second] = await write([charge('e', 2)]);
    // A lane read (outbox_lane_next, row by row) holds the lane's decision lock shared while it
    // parks e:2 behind its blocking dead letter; it commits only after the skip has started.
    const read = await db.pool.connect();
    try {
      await read.query('BEGIN');
      await read.query(`SELECT pg_advisory_xact_lock_shared($1, outbox_lane_of('e'))`, [
        LANE_DECISION_LOCK_CLASS,
      ]);
      const skipping = skipLaneDeadLetters(executor(), { messageIds: [first!.messageId] });
      await new Promise((resolve) => setTimeout(resolve, 200));
      await read.query(
        `INSERT INTO outbox_lane_parked (lane, id, aggregate_id, ordered, head, blocks)
         SELECT lane, id, aggregate_id, true, false, true FROM outbox_lane_messages
         WHERE message_id = $1`,
        [second!.messageId],
      );
      await read.query('COMMIT');
      expect(await skipping).toHaveLength(1);
    } finally {
      read.release();
    }
    // Made head by the skip (a single statement's snapshot would not have seen it: no head, for
    // good), so it is published.
    const { rows } = await db.pool.query<{ head: boolean }>(
      `SELECT p.head FROM outbox_lane_parked p JOIN outbox_lane_messages m
         ON m.lane = p.lane AND m.id = p.id WHERE m.message_id = $1`,
      [second!.messageId],
    );
    expect(rows).toEqual([{ head: true }]);
    await dispatcher().drain();
    expect(of(publisher, 'e')).toEqual([2]);
  });
});
