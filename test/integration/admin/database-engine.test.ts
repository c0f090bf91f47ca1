import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readDatabaseEngine, setDatabaseEngine } from '../../../src/admin/database-engine.js';
import { listAwaitingApproval } from '../../../src/admin/approvals.js';
import { readEffectStatus } from '../../../src/admin/effect-status.js';
import { readStatus } from '../../../src/admin/status.js';
import { OutboxValidationError } from '../../../src/core/errors.js';
import { createOutbox, fromPg, migrate, MIGRATIONS } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { inTransaction } from '../../helpers/transaction.js';

/**
 * Migration 036's record of the engine a schema's defaults follow: what a writer without an
 * `engine` writes, what the admin calls read, how the record changes and when a change is
 * refused. Each schema here is its own, migrated by the test.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
});
afterAll(() => db?.drop());

const count = async (sql: string) =>
  Number((await db.pool.query<{ n: string }>(`SELECT (${sql}) AS n`)).rows[0]!.n);

/** Migrates `schema` on one connection (migrate runs BEGIN/COMMIT on it). */
async function migrateSchema(schema: string, options: Parameters<typeof migrate>[1] = {}) {
  const client = await db.pool.connect();
  try {
    return await migrate(fromPg(client), { schema, ...options });
  } finally {
    client.release();
  }
}

const message = (n: number) => ({
  topic: 'mail.send',
  aggregateId: `user:${n}`,
  payload: { n },
});

describe('the engine a schema records (migration 036)', () => {
  it('is lanes on a new schema migrated without a choice, claims on one from before migration 036 (read inside a transaction that stays usable) and after its upgrade', async () => {
    await migrateSchema('e_default');
    expect(await readDatabaseEngine(fromPg(db.pool), { schema: 'e_default' })).toBe('lanes');
    await inTransaction(db.pool, (c) =>
      createOutbox({ schema: 'e_default' }).enqueue(fromPg(c), message(0)),
    );
    expect(await count('SELECT count(*) FROM e_default.outbox_lane_messages')).toBe(1);
    expect(await count('SELECT count(*) FROM e_default.outbox')).toBe(0);

    await migrateSchema('e_old', { migrations: MIGRATIONS.slice(0, 35) });
    await inTransaction(db.pool, async (client) => {
      expect(await readDatabaseEngine(fromPg(client), { schema: 'e_old' })).toBe('claims');
      // A failed statement would have aborted the transaction: this one would then throw.
      await createOutbox({ schema: 'e_old' }).enqueue(fromPg(client), message(1));
    });
    expect(await count('SELECT count(*) FROM e_old.outbox')).toBe(1);
    expect(await count('SELECT count(*) FROM e_old.outbox_lane_messages')).toBe(0);
    // Upgraded without a choice: it keeps the engine its writers used.
    await migrateSchema('e_old');
    expect(await readDatabaseEngine(fromPg(db.pool), { schema: 'e_old' })).toBe('claims');
  });

  it('decides where a writer without an engine writes, read at its first enqueue and kept', async () => {
    await migrateSchema('e_writer', { engine: 'claims' });
    const early = createOutbox({ schema: 'e_writer' });
    const kept = createOutbox({ schema: 'e_writer' });
    await inTransaction(db.pool, (c) => kept.enqueue(fromPg(c), message(1)));
    expect(await count('SELECT count(*) FROM e_writer.outbox')).toBe(1);

    const change = await setDatabaseEngine(fromPg(db.pool), 'lanes', { schema: 'e_writer' });
    expect(change).toEqual({ engine: 'lanes', previous: 'claims', claimEngineUnpublished: 1 });
    // Made before the change, first used after it: follows the record.
    await inTransaction(db.pool, (c) => early.enqueue(fromPg(c), message(2)));
    // Used before the change: keeps what it read.
    await inTransaction(db.pool, (c) => kept.enqueue(fromPg(c), message(3)));
    expect(await count('SELECT count(*) FROM e_writer.outbox_lane_messages')).toBe(1);
    expect(await count('SELECT count(*) FROM e_writer.outbox')).toBe(2);
    // An explicit engine is not overridden by the record.
    await inTransaction(db.pool, (c) =>
      createOutbox({ schema: 'e_writer', engine: 'claims' }).enqueue(fromPg(c), message(4)),
    );
    expect(await count('SELECT count(*) FROM e_writer.outbox')).toBe(3);
  });

  it('decides which tables the admin calls read when not told an engine', async () => {
    await migrateSchema('e_admin', { engine: 'lanes' });
    const [held] = await inTransaction(db.pool, (c) =>
      createOutbox({ schema: 'e_admin' }).enqueue(fromPg(c), [
        { ...message(1), requiresApproval: true },
      ]),
    );
    const executor = fromPg(db.pool);
    const awaiting = await listAwaitingApproval(executor, { schema: 'e_admin' });
    expect(awaiting.map((a) => a.messageId)).toEqual([held!.messageId]);
    const { effects } = await readEffectStatus(executor, {
      schema: 'e_admin',
      messageIds: [held!.messageId],
    });
    expect(effects[0]?.state).toBe('awaiting approval');
    await inTransaction(db.pool, (c) =>
      createOutbox({ schema: 'e_admin' }).enqueue(fromPg(c), message(2)),
    );
    const status = await readStatus(executor, { schema: 'e_admin' });
    // The held one is backlog too until a lane read parks it (readLaneEngineStatus says why).
    expect(status).toMatchObject({ backlog: 2, awaitingApproval: 1, backlogEstimated: false });
    // The claim engine's tables do not hold them.
    expect(await listAwaitingApproval(executor, { schema: 'e_admin', engine: 'claims' })).toEqual(
      [],
    );
    expect(await readStatus(executor, { schema: 'e_admin', engine: 'claims' })).toMatchObject({
      backlog: 0,
      awaitingApproval: 0,
    });
  });

  it('refuses a move back to claims while the lanes engine holds unpublished messages, and changes nothing', async () => {
    await migrateSchema('e_back', { engine: 'lanes' });
    await inTransaction(db.pool, (c) =>
      createOutbox({ schema: 'e_back' }).enqueue(fromPg(c), message(1)),
    );
    const executor = fromPg(db.pool);
    await expect(setDatabaseEngine(executor, 'claims', { schema: 'e_back' })).rejects.toThrow(
      /lanes engine still holds unpublished messages \(backlog 1/,
    );
    expect(await readDatabaseEngine(executor, { schema: 'e_back' })).toBe('lanes');
    const forced = await setDatabaseEngine(executor, 'claims', { schema: 'e_back', force: true });
    expect(forced).toEqual({ engine: 'claims', previous: 'lanes', claimEngineUnpublished: 0 });
    expect(await readDatabaseEngine(executor, { schema: 'e_back' })).toBe('claims');
  });

  it('records a choice at migrate only where the record is created, and refuses a different one before applying anything', async () => {
    await migrateSchema('e_mig', { migrations: MIGRATIONS.slice(0, 35) });
    const upgraded = await migrateSchema('e_mig', { engine: 'lanes' });
    expect(upgraded.applied.map((m) => m.version)).toEqual(
      MIGRATIONS.slice(35).map((m) => m.version),
    );
    expect(await readDatabaseEngine(fromPg(db.pool), { schema: 'e_mig' })).toBe('lanes');
    // The same choice again: nothing to do.
    expect((await migrateSchema('e_mig', { engine: 'lanes' })).applied).toEqual([]);

    await migrateSchema('e_other', { migrations: MIGRATIONS.slice(0, 36), engine: 'claims' });
    const refused = migrateSchema('e_other', { engine: 'lanes' });
    await expect(refused).rejects.toThrow(OutboxValidationError);
    await expect(refused).rejects.toThrow(
      /records the claims engine already: `outbox engine lanes/,
    );
    expect(await readDatabaseEngine(fromPg(db.pool), { schema: 'e_other' })).toBe('claims');
    const versions = await db.pool.query('SELECT max(version) AS v FROM e_other.outbox_migrations');
    expect(versions.rows[0].v).toBe(36);

    await expect(migrateSchema('e_bad', { engine: 'queues' as never })).rejects.toThrow(
      /must be 'claims' or 'lanes', got "queues"/,
    );
    expect(await count(`SELECT count(*) FROM pg_namespace WHERE nspname = 'e_bad'`)).toBe(0);
  });

  it('refuses a schema that has no record, saying to migrate', async () => {
    await migrateSchema('e_none', { migrations: MIGRATIONS.slice(0, 35) });
    await expect(setDatabaseEngine(fromPg(db.pool), 'lanes', { schema: 'e_none' })).rejects.toThrow(
      /no engine record \(migration 36\): run `outbox migrate --schema e_none`/,
    );
  });

  it('refuses a change that names no engine, and changes nothing', async () => {
    await migrateSchema('e_unnamed');
    for (const engine of [undefined, 'queues'])
      await expect(
        setDatabaseEngine(fromPg(db.pool), engine as never, { schema: 'e_unnamed' }),
      ).rejects.toThrow(/must be 'claims' or 'lanes', got (undefined|"queues")/);
    expect(await readDatabaseEngine(fromPg(db.pool), { schema: 'e_unnamed' })).toBe('lanes');
  });
});
