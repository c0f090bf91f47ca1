import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readEffectStatus } from '../../../src/admin/effect-status.js';
import { fromPg, migrate, MIGRATIONS } from '../../../src/index.js';
import { laneMessagesStatusSql } from '../../../src/sql/effect-status.js';
import { createOutbox } from '../../../src/writer/create-outbox.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { explainAnalyze, rowsRead } from '../../helpers/explain.js';

/**
 * Migration 030 on a lanes engine in use: messages written at version 28 with the v7 ids of that
 * release's writer (its INSERT left `message_id` to the column default), one of them held; this
 * release's writer on the version 28 schema (its ids are version 8 already, computed in its
 * INSERT); the effect status before the migration (the pre-030 statement) and after it (every id
 * found by primary key, the old ones through `outbox_lane_v7_ids`); and a v7 row written after
 * the migration by a writer of the earlier release, found once `outbox_lane_record_v7_ids()` runs
 * again.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
});
afterAll(() => db?.drop());

/** `count` messages as version 28's writer wrote them: the default (v7) message id. */
const oldWriterRows = (count: number, prefix: string) => `
  WITH input AS (
    SELECT '${prefix}-' || (g % 50) AS agg, g AS n FROM generate_series(0, ${count - 1}) g
  ), counted AS (
    INSERT INTO outbox_aggregates (aggregate_id, last_sequence)
    SELECT agg, count(*) FROM input GROUP BY agg
    ON CONFLICT (aggregate_id) DO UPDATE
      SET last_sequence = outbox_aggregates.last_sequence + excluded.last_sequence
    RETURNING aggregate_id, last_sequence)
  INSERT INTO outbox_lane_messages (lane, id, aggregate_id, sequence, ordered, topic, payload)
  SELECT outbox_lane_of(i.agg), nextval('outbox_lane_ids'), i.agg,
         c.last_sequence - count(*) OVER (PARTITION BY i.agg ORDER BY i.n DESC) + 1, true,
         'mail.send', jsonb_build_object('n', i.n)
  FROM input i JOIN counted c ON c.aggregate_id = i.agg ORDER BY i.n
  RETURNING id::text, message_id::text AS "messageId"`;

const status = (messageIds: string[]) =>
  readEffectStatus(fromPg(db.pool), { engine: 'lanes', messageIds }).then((r) => r.effects);

describe('migration 030 with lane messages written before it', () => {
  it('finds the v7 ids written before it by primary key, and those of this release as well', async () => {
    const executor = fromPg(db.pool);
    await migrate(executor, { migrations: MIGRATIONS.filter((m) => m.version <= 28) });
    const old = (await db.pool.query<{ id: string; messageId: string }>(oldWriterRows(3_000, 'a')))
      .rows;
    expect(old.every((r) => r.messageId[14] === '7')).toBe(true);
    // One of them held, as version 28's writer held it.
    const heldOne = old[1_000]!;
    await db.pool.query(
      `INSERT INTO outbox_lane_approvals (id, lane, message_id, requested_by, expires_at, available_at)
       SELECT id, lane, message_id, 'agent', now() + interval '1 day', NULL
       FROM outbox_lane_messages WHERE id = $1`,
      [heldOne.id],
    );
    // This release's writer on the version 28 schema: version 8 ids, nothing new needed.
    const fresh = await createOutbox({ engine: 'lanes' }).enqueue(
      executor,
      { topic: 'mail.send', aggregateId: 'b-1', payload: {} },
      { allowAutocommit: true },
    );
    expect(fresh.messageId[14]).toBe('8');

    // Before the migration: the statement of version 28 (a scan for an id not held).
    const before = await status([old[5]!.messageId, heldOne.messageId, fresh.messageId]);
    expect(before.map((e) => e.state)).toEqual(['pending', 'awaiting approval', 'pending']);

    const applied = await migrate(executor);
    expect(applied.applied.map((m) => m.version)).toEqual(
      MIGRATIONS.filter((m) => m.version > 28).map((m) => m.version),
    );
    const recorded = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM outbox_lane_v7_ids`,
    );
    expect(recorded.rows[0]!.n).toBe(3_000);

    const after = await status([old[5]!.messageId, heldOne.messageId, fresh.messageId]);
    expect(after.map((e) => e.state)).toEqual(['pending', 'awaiting approval', 'pending']);
    expect(after.map((e) => e.messageId)).toEqual([
      old[5]!.messageId,
      heldOne.messageId,
      fresh.messageId,
    ]);
    // An old id is one probe of the recorded places and one of the table.
    const client = await db.pool.connect();
    try {
      const plan = await explainAnalyze(client, laneMessagesStatusSql('public'), [
        [old[2_500]!.messageId],
        [],
        null,
      ]);
      expect(plan['Actual Rows']).toBe(1);
      expect(rowsRead(plan, 'outbox_lane_messages')).toBe(1);
      expect(rowsRead(plan, 'outbox_lane_v7_ids')).toBe(1);
    } finally {
      client.release();
    }

    // A writer of version 28 still running after the migration: its v7 row is found once the
    // operator records it (docs/operations.md).
    const late = (await db.pool.query<{ id: string; messageId: string }>(oldWriterRows(1, 'c')))
      .rows[0]!;
    expect((await status([late.messageId]))[0]!.state).toBe('not found');
    const again = await db.pool.query<{ n: string }>(`SELECT outbox_lane_record_v7_ids() AS n`);
    expect(Number(again.rows[0]!.n)).toBe(1);
    expect((await status([late.messageId]))[0]!.state).toBe('pending');
  }, 120_000);
});
