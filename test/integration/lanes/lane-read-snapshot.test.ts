import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import type { OutgoingMessage } from '../../../src/publishers/publisher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';
import { createOutbox } from '../../../src/writer/create-outbox.js';
import { inTransaction } from '../../helpers/transaction.js';

/**
 * `outbox_lane_next` runs a statement per lane, each with its own snapshot (READ COMMITTED):
 * which lanes hold delayed or held messages is read once, before the lanes are read. A delayed
 * or held message committed between the two was read by the fast path of a lane "without
 * delayed messages" and returned: published at once, before its time or without its approval
 * (seen in CI: a 1.5 s delay published 1 ms after the commit). Since migration 031 a lane's read
 * stops before the first delayed or held row its own snapshot sees, and the next call parks it.
 *
 * Made deterministic with a lock: a transaction of the test holds the parked-row key that the
 * read of an earlier lane (a not-due delayed message there) must insert, so the call waits in
 * the middle of its lanes; the test commits the new messages then, and lets it go.
 */
let db: TestDatabase;
beforeEach(async () => {
  db = await createTestDatabase();
});
afterEach(async () => {
  await db.drop();
});

const lanes = createOutbox({ engine: 'lanes' });
const laneOf = async (aggregateId: string) =>
  Number(
    (await db.pool.query<{ lane: number }>('SELECT outbox_lane_of($1) AS lane', [aggregateId]))
      .rows[0]!.lane,
  );

/** Aggregate ids whose lanes come after `lane` (the call reads its lanes in lane order). */
async function aggregatesAfter(lane: number, n: number, prefix: string): Promise<string[]> {
  const found: string[] = [];
  for (let i = 0; found.length < n; i++)
    if ((await laneOf(`${prefix}-${i}`)) > lane) found.push(`${prefix}-${i}`);
  return found;
}

/**
 * Runs one drain whose read of lane `blocker`'s delayed message waits on a parked-row key the
 * test holds; `meanwhile` runs (and commits) while it waits. Returns what the drain published.
 */
async function drainAround(meanwhile: () => Promise<void>): Promise<OutgoingMessage[]> {
  // Lane 0's first aggregate: every other lane is read after it.
  let blocker = '';
  for (let i = 0; !blocker; i++) if ((await laneOf(`blocker-${i}`)) === 0) blocker = `blocker-${i}`;
  const [early] = await enqueueLanes(db.pool, [
    { topic: 'reminder.send', aggregateId: blocker, payload: {}, delayMs: 600_000 },
  ]);
  const { rows } = await db.pool.query<{ id: string }>(
    'SELECT id::text AS id FROM outbox_lane_messages WHERE message_id = $1',
    [early!.messageId],
  );
  const holder = await db.pool.connect();
  const published: OutgoingMessage[] = [];
  try {
    await holder.query('BEGIN');
    await holder.query(
      `INSERT INTO outbox_lane_parked (lane, id, aggregate_id, ordered, head, blocks)
       VALUES (0, $1, $2, true, true, true)`,
      [rows[0]!.id, blocker],
    );
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: {
        publish: async (messages) => {
          published.push(...messages);
          return messages.map(() => ({ status: 'published' as const }));
        },
      },
    });
    const drained = dispatcher.drain();
    // The call waits on the key the holder inserted: in the middle of its lanes.
    await expect
      .poll(
        async () =>
          Number(
            (
              await db.pool.query<{ n: string }>(
                `SELECT count(*) AS n FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'
                   AND query LIKE '%outbox_lane_next%'`,
              )
            ).rows[0]!.n,
          ),
        { timeout: 10_000 },
      )
      .toBe(1);
    await meanwhile();
    await holder.query('ROLLBACK');
    await drained;
    // And the next drain: what the first one stopped before is parked, not published.
    await createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: {
        publish: async (messages) => {
          published.push(...messages);
          return messages.map(() => ({ status: 'published' as const }));
        },
      },
    }).drain();
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    holder.release();
  }
  return published;
}

describe('lanes engine: a message committed while a lane read is under way', () => {
  it('a delayed or held message committed during the read of the lanes is not published before its time or its approval', async () => {
    const [delayed, held, after] = await aggregatesAfter(0, 3, 'late');
    const written: string[] = [];
    const published = await drainAround(async () => {
      await inTransaction(db.pool, async (client) => {
        const messages = await lanes.enqueue(fromPg(client), [
          { topic: 'reminder.send', aggregateId: delayed!, payload: {}, delayMs: 600_000 },
          { topic: 'payment.charge', aggregateId: held!, payload: {}, requiresApproval: true },
          // Its aggregate's next message: after a held one, it waits for it (G4).
          { topic: 'payment.charge', aggregateId: held!, payload: { n: 2 } },
          { topic: 'mail.send', aggregateId: after!, payload: {} },
        ]);
        written.push(...messages.map((m) => m.messageId));
      });
    });
    const ids = published.map((m) => m.id);
    expect(ids).not.toContain(written[0]); // delayed ten minutes
    expect(ids).not.toContain(written[1]); // awaiting its approval
    expect(ids).not.toContain(written[2]); // behind it
    expect(ids).toContain(written[3]); // nothing before it: published
    // Both are parked now, awaiting their time and their decision.
    const parked = await db.pool.query<{ n: string }>(
      `SELECT count(*) AS n FROM outbox_lane_parked p JOIN outbox_lane_messages m
         ON m.lane = p.lane AND m.id = p.id
       WHERE m.message_id = ANY ($1::uuid[])`,
      [written.slice(0, 3)],
    );
    expect(Number(parked.rows[0]!.n)).toBe(3);
  });
});
