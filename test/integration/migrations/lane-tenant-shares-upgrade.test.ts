import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { laneLeaveSql } from '../../../src/sql/lanes.js';
import { fromPg, migrate, MIGRATIONS, type OutgoingMessage } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';

/**
 * Migration 028 on a lanes engine in use: tenant A's backlog and tenant B's messages written at
 * version 27 (B's first message of b-1 parked as a failure then), the migration, then one
 * dispatcher: B's messages written before the migration get shares ahead of A's backlog (the
 * indexes hold the rows already there), every aggregate in order, the parked one first in its
 * aggregate. And a dispatcher of version 27 calls the old signature, and gets no shares.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
});
afterAll(() => db?.drop());

const oldCall = `SELECT * FROM outbox_lane_next('v27', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', true, 20, 0::smallint, 60000, 0, 0, 0, false, '{}', '{}')`;

describe('migration 028 with lane messages written before it', () => {
  it('keeps them, and gives the tenants written before it their shares, in order', async () => {
    const executor = fromPg(db.pool);
    await migrate(executor, { migrations: MIGRATIONS.slice(0, 27) });
    // Version 27's rows as its writer wrote them: A 3,000 on 300 aggregates, then B's 2 on each
    // of b-0..b-7, tenant in the headers.
    await db.pool.query(`
      WITH input AS (
        SELECT 'a-' || (g % 300) AS agg, g AS n, 'tenant-a' AS tenant FROM generate_series(0, 2999) g
        UNION ALL
        SELECT 'b-' || (g % 8), 3000 + g, 'tenant-b' FROM generate_series(0, 15) g
      ), numbered AS (
        SELECT agg, n, tenant, row_number() OVER (PARTITION BY agg ORDER BY n) AS s FROM input
      ), counted AS (
        INSERT INTO outbox_aggregates (aggregate_id, last_sequence)
        SELECT agg, max(s) FROM numbered GROUP BY agg RETURNING aggregate_id)
      INSERT INTO outbox_lane_messages (lane, id, aggregate_id, sequence, ordered, topic, payload, headers)
      SELECT outbox_lane_of(agg), nextval('outbox_lane_ids'), agg, s, true, 'mail.send',
             jsonb_build_object('n', n), jsonb_build_object('tenant_id', tenant)
      FROM numbered ORDER BY n`);
    // b-1's first message was published and failed at version 27: parked, blocking b-1.
    await db.pool.query(`
      INSERT INTO outbox_lane_parked (lane, id, aggregate_id, ordered, head, blocks, attempts,
                                      last_error, available_at)
      SELECT lane, id, aggregate_id, true, true, true, 1, 'refused', now() + interval '400 ms'
      FROM outbox_lane_messages WHERE aggregate_id = 'b-1' AND sequence = 1`);
    const applied = await migrate(executor);
    expect(applied.applied.map((m) => m.version)).toEqual(
      MIGRATIONS.slice(27).map((m) => m.version),
    );
    // The tenant index holds the rows written before it.
    const indexed = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM outbox_lane_messages WHERE headers ->> 'tenant_id' = 'tenant-b'`,
    );
    expect(indexed.rows[0]!.n).toBe(16);

    // A dispatcher of version 27: the old signature works and returns no shares.
    await db.pool.query(`SELECT * FROM outbox_lane_balance('v27', 60000, 16)`);
    const old = await db.pool.query<{ lane: number }>(oldCall);
    expect(old.rows.some((r) => r.lane === -2)).toBe(false);
    expect(old.rows.length).toBeGreaterThan(20);
    await db.pool.query(laneLeaveSql('public'), ['v27']);

    const seen: OutgoingMessage[] = [];
    await createLaneDispatcher({
      executor,
      batchSize: 50,
      publisher: {
        publish: async (messages) => {
          await new Promise((resolve) => setTimeout(resolve, 2));
          seen.push(...messages);
          return messages.map(() => ({ status: 'published' as const }));
        },
      },
    }).drain();
    // The parked head is due after 400 ms: a second drain takes it and what parked behind it.
    await new Promise((resolve) => setTimeout(resolve, 450));
    await createLaneDispatcher({
      executor,
      publisher: {
        publish: async (messages) => {
          seen.push(...messages);
          return messages.map(() => ({ status: 'published' as const }));
        },
      },
    }).drain();
    expect(new Set(seen.map((m) => m.id)).size).toBe(3_016);
    const order = new Map<string, number[]>();
    for (const m of seen)
      order.set(m.aggregateId, [...(order.get(m.aggregateId) ?? []), m.sequence]);
    for (const [aggregate, sequences] of order)
      expect([aggregate, sequences]).toEqual([
        aggregate,
        Array.from({ length: sequences.length }, (_, i) => i + 1),
      ]);
    // B's other aggregates went out ahead of A's backlog.
    const firstB = seen.findIndex((m) => m.aggregateId === 'b-0');
    expect(firstB).toBeLessThan(1_500);
  }, 120_000);
});
