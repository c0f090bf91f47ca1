import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { CandidateStore } from '../../../src/cdc/candidate-store.js';
import { createListenNotifyWakeSource } from '../../../src/dispatcher/wake/listen-notify.js';
import {
  createDispatcher,
  fromPg,
  InMemoryPublisher,
  OutboxValidationError,
  PgOutboxStore,
  type Publisher,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted, manyMessages, resetOutbox } from '../../helpers/outbox-fixtures.js';

/**
 * The dispatcher's commit modes (sql/commit-mode.ts), observed from inside the statements: row
 * triggers record the `synchronous_commit` each claim, settle, release and waiter write runs its
 * transaction with. Claims run with the server's `on` by default and `off` with `asyncClaim:
 * true`; settles and releases `on` by default and `off` with `asyncSettle: true`; waiter writes
 * `off`; the pooled session stays `on`. The asynchronous claim's guard after a crash recovery is
 * here as far as a shared server allows (a lease longer than the time since the last recovery);
 * test/chaos/dispatcher-async-claim-crash.test.ts crashes a private server.
 */
let db: TestDatabase;
let pool: pg.Pool;
beforeAll(async () => {
  db = await createTestDatabase();
  // One connection: every statement and the final SHOW run on the same session.
  pool = new pg.Pool({ connectionString: db.url, max: 1 });
  // As the test database's own pool: a connection the drop at the end terminates while it is
  // being closed reports a FATAL there, not an uncaught error (seen once in CI).
  pool.on('error', () => undefined);
  await db.pool.query(`
    CREATE TABLE commit_log (kind text NOT NULL, synchronous_commit text NOT NULL);
    CREATE FUNCTION log_commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO commit_log VALUES (
        CASE WHEN NEW.lease_owner IS NOT NULL THEN 'claim'
             WHEN NEW.dispatched_at IS NOT NULL THEN 'settle'
             ELSE 'release' END,
        current_setting('synchronous_commit'));
      RETURN NULL;
    END $$;
    CREATE TRIGGER log_commit_mode AFTER UPDATE ON outbox
      FOR EACH ROW EXECUTE FUNCTION log_commit_mode();
    -- A published message's settle moves it from the outbox to the dispatched ring (migrations
    -- 018 and 021): its write is the insert of a batch row into the ring's batch table.
    CREATE FUNCTION log_settle_commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO commit_log VALUES ('settle', current_setting('synchronous_commit'));
      RETURN NULL;
    END $$;
    CREATE TRIGGER log_settle_commit_mode AFTER INSERT ON outbox_dispatched_batch_0
      FOR EACH ROW EXECUTE FUNCTION log_settle_commit_mode();
    CREATE TRIGGER log_settle_commit_mode AFTER INSERT ON outbox_dispatched_batch_1
      FOR EACH ROW EXECUTE FUNCTION log_settle_commit_mode();
    CREATE TRIGGER log_settle_commit_mode AFTER INSERT ON outbox_dispatched_batch_2
      FOR EACH ROW EXECUTE FUNCTION log_settle_commit_mode();
    CREATE FUNCTION log_waiter_commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO commit_log VALUES (lower(TG_OP), current_setting('synchronous_commit'));
      RETURN NULL;
    END $$;
    CREATE TRIGGER log_waiter_commit_mode AFTER INSERT OR UPDATE OR DELETE ON outbox_waiters
      FOR EACH ROW EXECUTE FUNCTION log_waiter_commit_mode();`);
});
afterAll(async () => {
  await pool.end();
  await db.drop();
});
beforeEach(async () => {
  await resetOutbox(db.pool, { also: ['commit_log'] });
});

async function logged(): Promise<Record<string, string[]>> {
  const { rows } = await db.pool.query<{ kind: string; modes: string[] }>(
    `SELECT kind, array_agg(DISTINCT synchronous_commit) AS modes FROM commit_log GROUP BY kind`,
  );
  return Object.fromEntries(rows.map((r) => [r.kind, r.modes]));
}

async function sessionSetting(): Promise<string> {
  const { rows } = await pool.query<{ s: string }>(
    `SELECT current_setting('synchronous_commit') AS s`,
  );
  return rows[0]!.s;
}

/** Milliseconds since Postgres last reset its statistics: its last crash recovery, or earlier. */
async function sinceLastRecoveryMs(): Promise<number> {
  const { rows } = await db.pool.query<{ ms: number }>(
    `SELECT (extract(epoch FROM now() - pg_stat_get_bgwriter_stat_reset_time()) * 1000)::float8 AS ms`,
  );
  return rows[0]!.ms;
}

describe('dispatcher commit mode', () => {
  it('claims and settles wait for the WAL flush by default', async () => {
    await enqueueCommitted(db.pool, manyMessages(3, 2));
    const publisher = new InMemoryPublisher();
    const result = await createDispatcher({ executor: fromPg(pool), publisher }).drain();
    expect(result.published).toBe(6);
    expect(await logged()).toEqual({ claim: ['on'], settle: ['on'] });
  });

  it('with asyncSettle: true settles skip the flush wait, claims do not; the session is unchanged', async () => {
    await enqueueCommitted(db.pool, manyMessages(3, 2));
    const publisher = new InMemoryPublisher();
    const dispatcher = createDispatcher({ executor: fromPg(pool), publisher, asyncSettle: true });
    expect((await dispatcher.drain()).published).toBe(6);
    expect(await logged()).toEqual({ claim: ['on'], settle: ['off'] });
    expect(await sessionSetting()).toBe('on');
  });

  it('with asyncClaim: true claims skip the flush wait, settles do not; the session is unchanged', async () => {
    await enqueueCommitted(db.pool, manyMessages(3, 2));
    const publisher = new InMemoryPublisher();
    const dispatcher = createDispatcher({
      executor: fromPg(pool),
      publisher,
      asyncClaim: true,
      leaseMs: 1_000,
    });
    expect(await sinceLastRecoveryMs()).toBeGreaterThan(1_000);
    expect((await dispatcher.drain()).published).toBe(6);
    expect(await logged()).toEqual({ claim: ['off'], settle: ['on'] });
    expect(await sessionSetting()).toBe('on');
  });

  it('with asyncClaim: true nothing is claimed until leaseMs after the last crash recovery', async () => {
    await enqueueCommitted(db.pool, manyMessages(2, 1));
    // As if Postgres had recovered from a crash a moment ago: a lease longer than the time since.
    const leaseMs = Math.ceil(await sinceLastRecoveryMs()) + 3_600_000;
    const held = createDispatcher({
      executor: fromPg(pool),
      publisher: new InMemoryPublisher(),
      asyncClaim: true,
      leaseMs,
    });
    expect((await held.drain()).published).toBe(0);
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM outbox WHERE lease_owner IS NOT NULL OR attempts > 0`,
    );
    expect(rows[0].n).toBe(0);
    expect(await logged()).toEqual({});
    // Synchronous claims have no such pause: their leases survive a crash.
    const sync = createDispatcher({
      executor: fromPg(pool),
      publisher: new InMemoryPublisher(),
      leaseMs,
    });
    expect((await sync.drain()).published).toBe(2);
  });

  it('arms and disarms the wake source without waiting for the flush', async () => {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    const source = createListenNotifyWakeSource({ connect: async () => client });
    try {
      await source.start(() => undefined);
      await source.idle!();
      await source.idle!(); // the heartbeat's refresh: the same upsert, as an update
      await source.busy!();
    } finally {
      await source.stop();
    }
    const { rows } = await db.pool.query(`SELECT kind, synchronous_commit FROM commit_log`);
    expect(rows).toEqual([
      { kind: 'insert', synchronous_commit: 'off' },
      { kind: 'update', synchronous_commit: 'off' },
      { kind: 'delete', synchronous_commit: 'off' },
    ]);
  });

  it('with asyncSettle: true, retries and dead letters are settled the same way', async () => {
    await enqueueCommitted(db.pool, manyMessages(2, 1));
    const failing: Publisher = {
      publish: async (messages) =>
        messages.map(() => ({ status: 'retryable' as const, error: 'broker down' })),
    };
    const dispatcher = createDispatcher({
      executor: fromPg(pool),
      publisher: failing,
      maxAttempts: 1,
      asyncSettle: true,
    });
    expect((await dispatcher.drain()).deadLettered).toBe(2);
    const { rows } = await db.pool.query(
      `SELECT synchronous_commit FROM commit_log WHERE kind = 'release'`,
    );
    // A dead-lettering settle clears the lease without dispatched_at: logged as 'release'.
    expect(rows.map((r) => r.synchronous_commit)).toEqual(['off', 'off']);
  });

  it('PgOutboxStore.release and the CDC candidate store follow the modes too', async () => {
    const [a, b] = await enqueueCommitted(db.pool, manyMessages(2, 1));
    const request = {
      owner: 't#1',
      batchSize: 10,
      leaseMs: 60_000,
      deadLettersBlock: true,
    };
    const store = new PgOutboxStore(fromPg(pool), { settleCommit: 'async' });
    const claimed = await store.claim(request);
    await store.release('t#1', [claimed[0]!.rowId]);
    const candidates = new CandidateStore(fromPg(pool), {
      schema: 'public',
      settleCommit: 'async',
    });
    candidates.candidates.add(a!.id);
    const viaWal = await candidates.claim({ ...request, owner: 't#2' });
    expect(viaWal.map((m) => m.rowId)).toEqual([a!.id]);
    await candidates.settle('t#2', [{ rowId: a!.id, kind: 'published' }], {
      deadLettersBlock: true,
      leaseMs: 30_000,
    });
    const { rows } = await db.pool.query<{ kind: string; synchronous_commit: string }>(
      `SELECT kind, synchronous_commit FROM commit_log`,
    );
    expect(rows).toEqual([
      { kind: 'claim', synchronous_commit: 'on' },
      { kind: 'claim', synchronous_commit: 'on' },
      { kind: 'release', synchronous_commit: 'off' },
      { kind: 'claim', synchronous_commit: 'on' },
      { kind: 'settle', synchronous_commit: 'off' },
    ]);
    expect(b).toBeDefined();
    expect(await sessionSetting()).toBe('on');
  });

  it('rejects an asyncClaim that is not a boolean', () => {
    expect(() =>
      createDispatcher({
        executor: fromPg(pool),
        publisher: new InMemoryPublisher(),
        asyncClaim: 1 as unknown as boolean,
      }),
    ).toThrow(/asyncClaim: must be true or false, got 1/);
  });

  it('rejects an asyncSettle that is not a boolean', () => {
    expect(() =>
      createDispatcher({
        executor: fromPg(pool),
        publisher: new InMemoryPublisher(),
        asyncSettle: 'yes' as unknown as boolean,
      }),
    ).toThrow(OutboxValidationError);
  });
});
