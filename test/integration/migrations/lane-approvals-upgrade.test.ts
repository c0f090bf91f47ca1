import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import {
  approveMessages,
  createOutbox,
  fromPg,
  migrate,
  MIGRATIONS,
  type OutboxMessage,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';

/**
 * Migration 027 on a lanes engine in use: messages written at version 26 (one delayed, a failure
 * parked then, one parked behind it), the migration, then held messages: one dispatcher publishes
 * everything that is not held, each aggregate in order, and the held ones once approved.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
});
afterAll(() => db?.drop());

describe('migration 027 with lane messages written before it', () => {
  it('keeps them, and publishes them with held messages in order', async () => {
    const executor = fromPg(db.pool);
    await migrate(executor, { migrations: MIGRATIONS.slice(0, 26) });
    // Version 26's rows (as its writer wrote them), the first of old-2 delayed by 50 ms.
    await db.pool.query(`
      WITH counted AS (
        INSERT INTO outbox_aggregates (aggregate_id, last_sequence)
        SELECT 'old-' || a, 3 FROM generate_series(1, 3) a RETURNING aggregate_id)
      INSERT INTO outbox_lane_messages
        (lane, id, aggregate_id, sequence, ordered, topic, payload, available_at)
      SELECT outbox_lane_of(c.aggregate_id), nextval('outbox_lane_ids'), c.aggregate_id, s, true,
             'mail.send', jsonb_build_object('s', s),
             CASE WHEN c.aggregate_id = 'old-2' AND s = 1 THEN now() + interval '50 ms' END
      FROM counted c, generate_series(1, 3) s ORDER BY c.aggregate_id, s`);
    // A failure parked at version 26, old-1's first message, and its second parked behind it.
    await db.pool.query(`
      INSERT INTO outbox_lane_parked (lane, id, aggregate_id, ordered, head, blocks, attempts,
                                      last_error)
      SELECT lane, id, aggregate_id, true, sequence = 1, true, CASE WHEN sequence = 1 THEN 1 ELSE 0 END,
             CASE WHEN sequence = 1 THEN 'down' END
      FROM outbox_lane_messages WHERE aggregate_id = 'old-1' AND sequence <= 2`);
    await db.pool.query(
      `UPDATE outbox_lanes SET cursor = (SELECT max(id) FROM outbox_lane_messages
                                         WHERE aggregate_id = 'old-1' AND sequence = 2)
       WHERE lane = outbox_lane_of('old-1')`,
    );
    const applied = await migrate(executor);
    expect(applied.applied.map((m) => m.version)).toEqual([27]);

    const outbox = createOutbox({ engine: 'lanes' });
    const client = await db.pool.connect();
    let written;
    try {
      await client.query('BEGIN');
      const mail = (aggregateId: string, s: number, extra: Partial<OutboxMessage> = {}) => ({
        topic: 'mail.send',
        aggregateId,
        payload: { s },
        ...extra,
      });
      written = await outbox.enqueue(fromPg(client), [
        mail('old-1', 4, { requiresApproval: true }),
        mail('old-1', 5),
        mail('old-3', 4),
        mail('new-1', 1, { requiresApproval: true, ordered: false }),
      ]);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    const publisher = new InMemoryPublisher();
    const dispatcher = createLaneDispatcher({ executor, publisher, pollIntervalMs: 20 });
    const waitFor = async (n: number) => {
      const until = Date.now() + 10_000;
      while (publisher.published.length < n && Date.now() < until)
        await new Promise((resolve) => setTimeout(resolve, 20));
    };
    dispatcher.start();
    try {
      await waitFor(10);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(publisher.published).toHaveLength(10); // old-1 1..3, old-2 1..3, old-3 1..4
      await approveMessages(executor, [written[0]!.id, written[3]!.id], {
        by: 'alice',
        engine: 'lanes',
      });
      await waitFor(13);
    } finally {
      await dispatcher.stop();
    }
    const seen = new Map<string, number[]>();
    for (const m of publisher.published)
      seen.set(m.aggregateId, [...(seen.get(m.aggregateId) ?? []), m.sequence]);
    expect(Object.fromEntries(seen)).toEqual({
      'old-1': [1, 2, 3, 4, 5],
      'old-2': [1, 2, 3],
      'old-3': [1, 2, 3, 4],
      'new-1': [1],
    });
  });
});
