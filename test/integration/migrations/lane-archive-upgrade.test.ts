import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readEffectStatus } from '../../../src/admin/effect-status.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { fromPg, migrate, MIGRATIONS, pruneOutbox } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';

/**
 * Migrations 032 (the message id index) and 033 (the lane archive) on a lanes engine in use:
 * messages written and published at version 31, one aggregate parked behind a failure that
 * retention of version 31 passed; after the upgrade the effect status finds a message written
 * before it by its message id, an archiving prune archives what was consumed, the parked
 * messages the old prune passed are deleted when published (that prune deleted), and the
 * two-argument `outbox_lane_prune` a retention job of version 31 calls still runs.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
});
afterAll(() => db?.drop());

const count = async (sql: string) => Number((await db.pool.query<{ n: string }>(sql)).rows[0]!.n);

describe('migrations 032 and 033 with lane messages written before them', () => {
  it('finds old messages by id, archives what is consumed, and keeps the old prune running', async () => {
    const executor = fromPg(db.pool);
    await migrate(executor, { migrations: MIGRATIONS.slice(0, 31) });
    const written = await enqueueLanes(
      db.pool,
      Array.from({ length: 20 }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: `a-${i % 4}`,
        payload: { n: i },
      })),
    );
    let down = true;
    const publisher = new InMemoryPublisher({
      inject: (m) =>
        down && m.aggregateId === 'a-1' ? { status: 'retryable', error: 'down' } : undefined,
    });
    await createLaneDispatcher({
      executor,
      publisher,
      backoff: { baseMs: 3_600_000, maxMs: 3_600_000, jitterMs: 0 },
    }).drain();
    expect(publisher.published).toHaveLength(15);
    // Retention of version 31 (the two-argument function) passes a-1's parked five.
    await db.pool.query(`UPDATE outbox_lane_messages SET created_at = now() - interval '2 hours'
                         WHERE aggregate_id IN ('a-0', 'a-1')`);
    const old = await db.pool.query<{ n: string }>(
      `SELECT outbox_lane_prune(3600000, 1000)::text AS n`,
    );
    expect(Number(old.rows[0]!.n)).toBe(5);

    const applied = await migrate(executor);
    expect(applied.applied.map((m) => m.version)).toEqual(
      MIGRATIONS.slice(31).map((m) => m.version),
    );

    // Written before 032, found by message id (now through the index).
    const a2 = written.find((m) => m.aggregateId === 'a-2')!;
    const { effects } = await readEffectStatus(executor, {
      messageIds: [a2.messageId],
      engine: 'lanes',
    });
    expect(effects).toMatchObject([{ messageId: a2.messageId, state: 'published' }]);

    // An archiving prune of this version archives the consumed a-2 and a-3 (10).
    await db.pool.query(`UPDATE outbox_lane_messages SET created_at = now() - interval '2 hours'`);
    expect((await pruneOutbox(executor, { olderThanMs: 3_600_000, archive: true })).removed).toBe(
      10,
    );
    expect(await count('SELECT count(*) AS n FROM outbox_lane_archive')).toBe(10);
    // a-1's five, passed by the deleting prune of version 31, leave when published: deleted.
    down = false;
    await db.pool.query(`UPDATE outbox_lane_parked SET available_at = now()`);
    await createLaneDispatcher({ executor, publisher }).drain();
    expect(await count('SELECT count(*) AS n FROM outbox_lane_messages')).toBe(0);
    expect(await count('SELECT count(*) AS n FROM outbox_lane_archive')).toBe(10);
    // A retention job of version 31 still calls the two-argument function.
    await expect(
      db.pool.query(`SELECT outbox_lane_prune(3600000, 1000) AS n`),
    ).resolves.toBeDefined();
  }, 60_000);
});
