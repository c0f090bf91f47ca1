import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { fromPg, migrate, MIGRATIONS } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';

/**
 * Migration 030 on a lanes engine in use: messages written at version 29 by the TypeScript
 * writer (one aggregate's head parked as a failure, its successor behind it), the migration, then
 * plain-SQL messages of the same aggregates: their sequences continue the counters, and one
 * dispatcher publishes everything, each aggregate in order.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
});
afterAll(() => db?.drop());

describe('migration 030 with lane messages written before it', () => {
  it('keeps them; plain-SQL messages of the same aggregates follow them in order', async () => {
    const executor = fromPg(db.pool);
    await migrate(executor, { migrations: MIGRATIONS.slice(0, 29) });
    await enqueueLanes(
      db.pool,
      Array.from({ length: 40 }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: `a-${i % 4}`,
        payload: { n: i },
      })),
    );
    // a-1's first message failed at version 29: parked, blocking a-1, due soon.
    await db.pool.query(`
      INSERT INTO outbox_lane_parked (lane, id, aggregate_id, ordered, head, blocks, attempts,
                                      last_error, available_at)
      SELECT lane, id, aggregate_id, true, true, true, 1, 'refused', now() + interval '300 ms'
      FROM outbox_lane_messages WHERE aggregate_id = 'a-1' AND sequence = 1`);
    const applied = await migrate(executor);
    expect(applied.applied.map((m) => m.version)).toEqual(
      MIGRATIONS.slice(29).map((m) => m.version),
    );

    await db.pool.query(`
      INSERT INTO outbox_lane_inbox (topic, aggregate_id, payload)
      SELECT 'mail.send', 'a-' || (g % 4), jsonb_build_object('n', 40 + g)
      FROM generate_series(0, 7) g ORDER BY g % 4, g`);
    const { rows } = await db.pool.query<{ sequence: string }>(
      `SELECT sequence::text FROM outbox_lane_enqueue('mail.send', 'a-2', '{"n": 48}')`,
    );
    expect(rows[0]!.sequence).toBe('13');

    const publisher = new InMemoryPublisher();
    const drain = () => createLaneDispatcher({ executor, publisher }).drain();
    await drain();
    await new Promise((resolve) => setTimeout(resolve, 350));
    await drain();
    const byAggregate = new Map<string, number[]>();
    for (const m of publisher.published)
      byAggregate.set(m.aggregateId, [...(byAggregate.get(m.aggregateId) ?? []), m.sequence]);
    const expected = (n: number) => Array.from({ length: n }, (_, i) => i + 1);
    expect(Object.fromEntries(byAggregate)).toEqual({
      'a-0': expected(12),
      'a-1': expected(12),
      'a-2': expected(13),
      'a-3': expected(12),
    });
  }, 60_000);
});
