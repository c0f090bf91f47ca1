import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg, migrate, MIGRATIONS, PgOutboxStore } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted } from '../../helpers/outbox-fixtures.js';

/**
 * Migration 020 (the settle's advisory guard, issue 25) on an outbox in use: a message mid-lease
 * at version 19, a dead letter, a held message, and a writer of version 19's trigger still open
 * behind the leased one when the migration runs. The writer holds no advisory lock (its trigger
 * took none), so a settle after the migration could not see it; the migration waits for it.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
});
afterAll(() => db?.drop());

const states = async () =>
  (
    await db.pool.query<{ aggregate_id: string; sequence: string; state: string }>(
      `SELECT aggregate_id, sequence::text,
              CASE WHEN dispatched_at IS NOT NULL THEN 'dispatched'
                   WHEN dead_lettered_at IS NOT NULL THEN 'dead'
                   WHEN approval_state = 'awaiting' THEN 'held'
                   WHEN ready THEN 'ready' ELSE 'waiting' END AS state
       FROM outbox_messages ORDER BY aggregate_id, sequence`,
    )
  ).rows.map((r) => `${r.aggregate_id}:${r.sequence}:${r.state}`);

describe('migration 020 with a writer of version 19 open', () => {
  it('waits for the writer; the settle after it makes the writer’s message the head', async () => {
    const executor = fromPg(db.pool);
    await migrate(executor, { migrations: MIGRATIONS.slice(0, 19) });
    await enqueueCommitted(db.pool, [
      { topic: 'payment.charge', aggregateId: 'A', payload: 1 },
      { topic: 'payment.charge', aggregateId: 'D', payload: 1 },
      { topic: 'payment.refund', aggregateId: 'H', payload: 1, requiresApproval: true },
    ]);
    const store = new PgOutboxStore(executor);
    const leased = await store.claim({ owner: 'v19#1', batchSize: 10, leaseMs: 60_000 });
    const a = leased.find((m) => m.aggregateId === 'A')!;
    const d = leased.find((m) => m.aggregateId === 'D')!;
    await store.settle('v19#1', [{ rowId: d.rowId, kind: 'dead', error: 'x' }], {
      deadLettersBlock: true,
      leaseMs: 60_000,
    });

    const writer = await db.pool.connect();
    let migrated = false;
    try {
      await writer.query('BEGIN');
      await writer.query(
        `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('A', 'payment.charge', '2')`,
      );
      const migration = migrate(executor, { migrations: MIGRATIONS.slice(0, 20) }).then(
        () => (migrated = true),
      );
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(migrated).toBe(false);
      await writer.query('COMMIT');
      await migration;
    } finally {
      writer.release();
    }
    expect(migrated).toBe(true);
    const { rows } = await db.pool.query<{ version: number }>(
      `SELECT max(version)::int AS version FROM outbox_migrations`,
    );
    expect(rows[0]!.version).toBe(20);

    // The lease taken at version 19 is settled by the new function.
    const settled = await store.settle('v19#1', [{ rowId: a.rowId, kind: 'published' }], {
      deadLettersBlock: true,
      leaseMs: 60_000,
    });
    expect(settled).toEqual({ settled: [a.rowId], deferred: [] });
    expect(await states()).toEqual(['A:1:dispatched', 'A:2:ready', 'D:1:dead', 'H:1:held']);
    const next = await store.claim({ owner: 'v20#1', batchSize: 10, leaseMs: 60_000 });
    expect(next.map((m) => `${m.aggregateId}:${m.sequence}`)).toEqual(['A:2']);
  });
});
