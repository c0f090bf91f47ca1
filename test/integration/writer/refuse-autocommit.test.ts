import { PGlite } from '@electric-sql/pglite';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createOutbox,
  fromKysely,
  fromPg,
  fromPglite,
  migrate,
  OutboxAutocommitError,
  type SqlExecutor,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';

/**
 * The writer refuses a write that would commit on its own (issue 26): `fromPg(pool)`, a `pg`
 * client that never ran BEGIN or already committed, a Kysely instance, a PGlite database outside
 * BEGIN. Each refusal writes nothing and says what to do; `allowAutocommit: true` writes a lone
 * message. postgres.js, Drizzle (both drivers) and Prisma run the same case in their contract
 * suites (test/integration/store/enqueue-contract.ts).
 */

const outbox = createOutbox();
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

const rowsOf = async (aggregateId: string) =>
  (
    await db.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM outbox WHERE aggregate_id = $1',
      [aggregateId],
    )
  ).rows[0]!.n;

/** Enqueues one message on `executor`; the error it threw. */
async function refusal(executor: SqlExecutor, aggregateId: string): Promise<Error> {
  const error = await outbox
    .enqueue(executor, { topic: 'mail.send', aggregateId, payload: { to: 'a@example.com' } })
    .then(
      () => undefined,
      (e: unknown) => e,
    );
  expect(error).toBeInstanceOf(OutboxAutocommitError);
  return error as Error;
}

describe('pg', () => {
  it('fromPg(pool) is refused, names the fix, and writes nothing', async () => {
    const error = await refusal(fromPg(db.pool), 'pg:pool');
    expect(error.message).toMatch(/pg Pool/);
    expect(error.message).toMatch(/pool\.connect\(\)/);
    expect(error.message).toMatch(/BEGIN/);
    expect(error.message).toMatch(/allowAutocommit/);
    expect(await rowsOf('pg:pool')).toBe(0);
  });

  it('a client that never ran BEGIN, and one that already committed, are refused', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('SELECT 1');
      const error = await refusal(fromPg(client), 'pg:idle');
      expect(error.message).toMatch(/not inside a transaction/);
      await client.query('BEGIN');
      await client.query('COMMIT');
      await refusal(fromPg(client), 'pg:idle');
      // After ROLLBACK too.
      await client.query('BEGIN');
      await client.query('ROLLBACK');
      await refusal(fromPg(client), 'pg:idle');
    } finally {
      client.release();
    }
    expect(await rowsOf('pg:idle')).toBe(0);
  });

  it('a fresh client whose only query so far is the connect handshake is refused', async () => {
    // The handshake's ReadyForQuery already says idle.
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      await refusal(fromPg(client), 'pg:fresh');
    } finally {
      await client.end();
    }
    expect(await rowsOf('pg:fresh')).toBe(0);
  });

  it('inside BEGIN it writes, right after BEGIN (before any write of the transaction) too', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await outbox.enqueue(fromPg(client), { topic: 't', aggregateId: 'pg:tx', payload: {} });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    expect(await rowsOf('pg:tx')).toBe(1);
  });

  it('in a failed transaction the server refuses it, not the writer', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('SELECT 1/0').catch(() => undefined);
      const error = await outbox
        .enqueue(fromPg(client), { topic: 't', aggregateId: 'pg:failed', payload: {} })
        .catch((e: unknown) => e);
      expect(error).not.toBeInstanceOf(OutboxAutocommitError);
      expect((error as Error).message).toMatch(/current transaction is aborted/);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await rowsOf('pg:failed')).toBe(0);
  });

  it('allowAutocommit: true writes a lone message, on a pool and on an idle client', async () => {
    const [one] = await outbox.enqueue(
      fromPg(db.pool),
      [{ topic: 't', aggregateId: 'pg:lone', payload: {} }],
      { allowAutocommit: true },
    );
    expect(one).toMatchObject({ aggregateId: 'pg:lone', sequence: 1 });
    const client = await db.pool.connect();
    try {
      await outbox.enqueue(
        fromPg(client),
        { topic: 't', aggregateId: 'pg:lone', payload: {} },
        { allowAutocommit: true },
      );
    } finally {
      client.release();
    }
    expect(await rowsOf('pg:lone')).toBe(2);
  });

  it('the dispatcher-side statements on fromPg(pool) are not affected', async () => {
    const { rows } = await fromPg(db.pool).query<{ n: number }>('SELECT 1::int AS n');
    expect(rows).toEqual([{ n: 1 }]);
  });
});

describe('Kysely', () => {
  it('the Kysely instance is refused; its transaction writes', async () => {
    const kysely = new Kysely<Record<string, never>>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: db.url, max: 2 }) }),
    });
    try {
      const error = await refusal(fromKysely(kysely), 'kysely:db');
      expect(error.message).toMatch(/db\.transaction\(\)\.execute/);
      expect(await rowsOf('kysely:db')).toBe(0);
      await kysely
        .transaction()
        .execute((trx) =>
          outbox.enqueue(fromKysely(trx), { topic: 't', aggregateId: 'kysely:tx', payload: {} }),
        );
      const controlled = await kysely.startTransaction().execute();
      await outbox.enqueue(fromKysely(controlled), {
        topic: 't',
        aggregateId: 'kysely:tx',
        payload: {},
      });
      await controlled.commit().execute();
      expect(await rowsOf('kysely:tx')).toBe(2);
    } finally {
      await kysely.destroy();
    }
  });
});

describe('PGlite', () => {
  it('the database outside BEGIN is refused; its transaction, and a BEGIN of its own, write', async () => {
    const lite = await PGlite.create();
    try {
      await migrate(fromPglite(lite), { engine: 'claims' });
      const count = async (aggregateId: string) =>
        (
          await lite.query<{ n: number }>(
            'SELECT count(*)::int AS n FROM outbox WHERE aggregate_id = $1',
            [aggregateId],
          )
        ).rows[0]!.n;
      const error = await refusal(fromPglite(lite), 'lite:db');
      expect(error.message).toMatch(/db\.transaction/);
      expect(await count('lite:db')).toBe(0);
      await lite.transaction((tx) =>
        outbox.enqueue(fromPglite(tx), { topic: 't', aggregateId: 'lite:tx', payload: {} }),
      );
      await lite.query('BEGIN');
      await outbox.enqueue(fromPglite(lite), { topic: 't', aggregateId: 'lite:tx', payload: {} });
      await lite.query('COMMIT');
      expect(await count('lite:tx')).toBe(2);
    } finally {
      await lite.close();
    }
  });
});
