import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { createOutbox, fromPg, migrate, MIGRATIONS } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';

/**
 * Migration 026 on a lanes engine in use: messages written at version 25 (and a failure parked
 * then), the migration, then messages with a delay, a dedupe key and shadow: one dispatcher
 * publishes everything but the shadow message, each aggregate in order.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
});
afterAll(() => db?.drop());

describe('migration 026 with lane messages written before it', () => {
  it('keeps them, and publishes them with the new kinds in order', async () => {
    const executor = fromPg(db.pool);
    await migrate(executor, { migrations: MIGRATIONS.slice(0, 25) });
    // Version 25's rows (as its writer wrote them: no available_at, no shadow).
    await db.pool.query(`
      WITH counted AS (
        INSERT INTO outbox_aggregates (aggregate_id, last_sequence)
        SELECT 'old-' || a, 3 FROM generate_series(1, 4) a RETURNING aggregate_id)
      INSERT INTO outbox_lane_messages (lane, id, aggregate_id, sequence, ordered, topic, payload)
      SELECT outbox_lane_of(c.aggregate_id), nextval('outbox_lane_ids'), c.aggregate_id, s, true,
             'mail.send', jsonb_build_object('s', s)
      FROM counted c, generate_series(1, 3) s ORDER BY c.aggregate_id, s`);
    // A failure parked at version 25: old-1's first message, due now, blocking its aggregate.
    await db.pool.query(`
      INSERT INTO outbox_lane_parked (lane, id, aggregate_id, ordered, head, blocks, attempts,
                                      last_error)
      SELECT lane, id, aggregate_id, true, true, true, 1, 'down'
      FROM outbox_lane_messages WHERE aggregate_id = 'old-1' AND sequence = 1`);
    // 026, and the migrations after it (this build's dispatcher needs them all).
    const applied = await migrate(executor);
    expect(applied.applied.map((m) => m.version)).toEqual(
      MIGRATIONS.slice(25).map((m) => m.version),
    );

    const outbox = createOutbox({ engine: 'lanes' });
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await outbox.enqueue(fromPg(client), [
        { topic: 'mail.send', aggregateId: 'old-2', payload: { s: 4 }, delayMs: 1 },
        { topic: 'mail.send', aggregateId: 'old-3', payload: { s: 4 }, shadow: true },
        { topic: 'mail.send', aggregateId: 'old-4', payload: { s: 4 }, dedupeKey: 'k' },
        { topic: 'mail.send', aggregateId: 'old-4', payload: { s: 5 }, dedupeKey: 'k' },
      ]);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
    const publisher = new InMemoryPublisher();
    const dispatcher = createLaneDispatcher({ executor, publisher, pollIntervalMs: 20 });
    dispatcher.start();
    try {
      const until = Date.now() + 10_000;
      while (publisher.published.length < 14 && Date.now() < until)
        await new Promise((resolve) => setTimeout(resolve, 20));
    } finally {
      await dispatcher.stop();
    }
    const seen = new Map<string, number[]>();
    for (const m of publisher.published)
      seen.set(m.aggregateId, [...(seen.get(m.aggregateId) ?? []), m.sequence]);
    expect(Object.fromEntries(seen)).toEqual({
      'old-1': [1, 2, 3],
      'old-2': [1, 2, 3, 4],
      'old-3': [1, 2, 3],
      'old-4': [1, 2, 3, 4],
    });
    expect(dispatcher.stats()).toMatchObject({ shadowed: 1 });
  });
});
