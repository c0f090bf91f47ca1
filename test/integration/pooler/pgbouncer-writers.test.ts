import { PrismaPg } from '@prisma/adapter-pg';
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createOutbox,
  fromDrizzle,
  fromKysely,
  fromPg,
  fromPostgresJs,
  fromPrisma,
  OutboxPoolerError,
  type SqlExecutor,
} from '../../../src/index.js';
import { connectInMemory, createToolServer, pgPoolTransactions } from '../../../src/agent/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { NOTES_TABLE_SQL, notesTool, resultJson } from '../agent/notes-tool.js';
import { requirePgBouncer, startPgBouncer, type PgBouncer } from '../../helpers/pgbouncer.js';
import { importPrismaClient } from '../../helpers/prisma-client.js';

/**
 * Issue 41: the writer through PgBouncer 1.18 in transaction mode (4 server connections, no
 * prepared-statement support), on every client adapter, with the options the docs give: each
 * adapter's own transactions, 6 at a time so they land on every server connection in turn.
 * And without those options, the failure says what to set.
 */
const runs = requirePgBouncer();
const outbox = createOutbox();

let db: TestDatabase;
let bouncer: PgBouncer;
let pooledUrl: string;
beforeAll(async () => {
  if (!runs) return;
  db = await createTestDatabase();
  await db.pool.query(NOTES_TABLE_SQL);
  bouncer = await startPgBouncer(db.url);
  pooledUrl = bouncer.url(db.url);
});
afterAll(async () => {
  if (!runs) return;
  await bouncer?.stop();
  await db?.drop();
});

/** A transaction of the adapter under test, handing agent-outbox its executor. */
type Transaction = (fn: (executor: SqlExecutor) => Promise<void>) => Promise<unknown>;

/**
 * 30 transactions, 6 at a time, each enqueuing 2 messages of one of 5 aggregates: all 60
 * committed, each aggregate sequenced 1..12 with no gap and no repeat.
 */
async function writesThrough(name: string, transaction: Transaction): Promise<void> {
  const jobs = Array.from({ length: 30 }, (_, i) => i);
  await Promise.all(
    Array.from({ length: 6 }, async () => {
      for (let i = jobs.shift(); i !== undefined; i = jobs.shift()) {
        const aggregateId = `${name}-${i % 5}`;
        await transaction((executor) =>
          outbox
            .enqueue(executor, [
              { topic: 'mail.send', aggregateId, payload: { i } },
              { topic: 'mail.send', aggregateId, payload: { i, second: true } },
            ])
            .then(() => undefined),
        );
      }
    }),
  );
  const { rows } = await db.pool.query<{ aggregate_id: string; sequences: number[] }>(
    `SELECT aggregate_id, array_agg(sequence::int ORDER BY sequence) AS sequences
       FROM outbox WHERE aggregate_id LIKE $1 || '-%' GROUP BY aggregate_id ORDER BY 1`,
    [name],
  );
  expect(rows).toEqual(
    [0, 1, 2, 3, 4].map((a) => ({
      aggregate_id: `${name}-${a}`,
      sequences: Array.from({ length: 12 }, (_, i) => i + 1),
    })),
  );
}

/** The part of the generated Prisma client this file calls. */
interface PrismaLike {
  $transaction<R>(fn: (tx: PrismaTx) => Promise<R>): Promise<R>;
  $disconnect(): Promise<void>;
}
interface PrismaTx {
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): Promise<T>;
  $executeRawUnsafe(query: string, ...values: unknown[]): Promise<number>;
}

describe.runIf(runs)('the writer through PgBouncer in transaction mode (issue 41)', () => {
  it('pg: fromPg(client, { preparedStatements: false })', async () => {
    const pool = new pg.Pool({ connectionString: pooledUrl, max: 6 });
    try {
      await writesThrough('pg', async (fn) => {
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          await fn(fromPg(client, { preparedStatements: false }));
          await client.query('COMMIT');
        } finally {
          client.release();
        }
      });
    } finally {
      await pool.end();
    }
  });

  it('Kysely: fromKysely(trx), nothing to set', async () => {
    const kysely = new Kysely<object>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: pooledUrl, max: 6 }) }),
    });
    try {
      await writesThrough('kysely', (fn) =>
        kysely.transaction().execute((trx) => fn(fromKysely(trx))),
      );
    } finally {
      await kysely.destroy();
    }
  });

  it('postgres.js: postgres(url, { prepare: false }), fromPostgresJs(tx)', async () => {
    const sql = postgres(pooledUrl, { max: 6, prepare: false, onnotice: () => undefined });
    try {
      await writesThrough('postgresjs', (fn) => sql.begin((tx) => fn(fromPostgresJs(tx))));
    } finally {
      await sql.end();
    }
  });

  it('Drizzle on node-postgres: fromDrizzle(tx, { preparedStatements: false })', async () => {
    const pool = new pg.Pool({ connectionString: pooledUrl, max: 6 });
    const orm = drizzleNodePg(pool);
    try {
      await writesThrough('drizzlepg', (fn) =>
        orm.transaction((tx) => fn(fromDrizzle(tx, { preparedStatements: false }))),
      );
    } finally {
      await pool.end();
    }
  });

  it('Drizzle on postgres.js: postgres(url, { prepare: false }), fromDrizzle(tx)', async () => {
    const sql = postgres(pooledUrl, { max: 6, prepare: false, onnotice: () => undefined });
    const orm = drizzlePostgresJs(sql);
    try {
      await writesThrough('drizzlepjs', (fn) => orm.transaction((tx) => fn(fromDrizzle(tx))));
    } finally {
      await sql.end();
    }
  });

  it('Prisma (driver adapter @prisma/adapter-pg): fromPrisma(tx), nothing to set', async () => {
    const { PrismaClient } = (await importPrismaClient()) as {
      PrismaClient: new (options: { adapter: PrismaPg }) => PrismaLike;
    };
    const prisma = new PrismaClient({
      adapter: new PrismaPg({ connectionString: pooledUrl, max: 6 }),
    });
    try {
      await writesThrough('prisma', (fn) => prisma.$transaction((tx) => fn(fromPrisma(tx))));
    } finally {
      await prisma.$disconnect();
    }
  });

  it('the agent tool: outboxTool on pgPoolTransactions(pool, { preparedStatements: false }), once per key', async () => {
    const pool = new pg.Pool({ connectionString: pooledUrl, max: 6 });
    const tool = notesTool(pgPoolTransactions(pool, { preparedStatements: false }));
    const mcp = await connectInMemory(createToolServer({ name: 'notes', tools: [tool] }));
    try {
      // Six keys, each called twice at once: one note and two messages per key.
      const results = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          mcp.client.callTool({
            name: 'add_note',
            arguments: { body: `pooled ${i % 6}`, idempotency_key: `pooled-${i % 6}` },
          }),
        ),
      );
      expect(results.every((r) => !r.isError)).toBe(true);
      expect(results.filter((r) => resultJson(r).deduped === true)).toHaveLength(6);
    } finally {
      await mcp.close();
      await pool.end();
    }
    const counts = await db.pool.query<{ notes: number; messages: number }>(
      `SELECT (SELECT count(*)::int FROM notes WHERE body LIKE 'pooled %') AS notes,
              (SELECT count(*)::int FROM outbox WHERE aggregate_id IN
                 (SELECT 'note:' || id FROM notes WHERE body LIKE 'pooled %')) AS messages`,
    );
    expect(counts.rows[0]).toEqual({ notes: 6, messages: 12 });
  });

  /**
   * Without the option: client A prepares the INSERT on the server connection its transaction
   * got; B then holds that connection in an open transaction (PgBouncer hands out its most
   * recently used one first), so A's next transaction runs on another one, where the statement
   * `pg` believes prepared does not exist. Tried a few times in case B lands elsewhere.
   */
  it('pg with prepared statements on: OutboxPoolerError naming preparedStatements: false', async () => {
    const pool = new pg.Pool({ connectionString: pooledUrl, max: 2 });
    const errors: unknown[] = [];
    const a = await pool.connect();
    const b = await pool.connect();
    const enqueueOnA = async () => {
      await a.query('BEGIN');
      try {
        await outbox.enqueue(fromPg(a), { topic: 'mail.send', aggregateId: 'prep', payload: {} });
        await a.query('COMMIT');
      } catch (error) {
        errors.push(error);
        await a.query('ROLLBACK');
      }
    };
    try {
      for (let attempt = 0; attempt < 10 && errors.length === 0; attempt++) {
        await enqueueOnA();
        await b.query('BEGIN');
        await b.query('SELECT 1');
        await enqueueOnA();
        await b.query('COMMIT');
      }
    } finally {
      a.release(true);
      b.release(true);
      await pool.end();
    }
    expect(errors.length).toBeGreaterThan(0);
    for (const error of errors) {
      expect(error).toBeInstanceOf(OutboxPoolerError);
      expect((error as Error).message).toMatch(
        /^prepared statement "agent_outbox_[0-9a-f]+" (does not exist|already exists): a connection pooler in transaction mode .* Pass \{ preparedStatements: false \} to fromPg\(\)/,
      );
      expect((error as { cause?: { code?: string } }).cause?.code).toMatch(/^(26000|42P05)$/);
    }
  });

  it('postgres.js with prepare on (its default): OutboxPoolerError naming prepare: false', async () => {
    const a = postgres(pooledUrl, { max: 1, onnotice: () => undefined });
    const b = postgres(pooledUrl, { max: 1, onnotice: () => undefined });
    const errors: unknown[] = [];
    const enqueueOnA = () =>
      a
        .begin((tx) =>
          outbox.enqueue(fromPostgresJs(tx), {
            topic: 'mail.send',
            aggregateId: 'prep-js',
            payload: {},
          }),
        )
        .catch((error: unknown) => errors.push(error));
    try {
      for (let attempt = 0; attempt < 10 && errors.length === 0; attempt++) {
        await enqueueOnA();
        let release: () => void = () => undefined;
        const held = new Promise<void>((resolve) => (release = resolve));
        let holding: () => void = () => undefined;
        const inside = new Promise<void>((resolve) => (holding = resolve));
        const holder = b.begin(async (tx) => {
          await tx`SELECT 1`;
          holding();
          await held;
        });
        await inside;
        await enqueueOnA();
        release();
        await holder;
      }
    } finally {
      await a.end();
      await b.end();
    }
    expect(errors.length).toBeGreaterThan(0);
    for (const error of errors) {
      expect(error).toBeInstanceOf(OutboxPoolerError);
      expect((error as Error).message).toMatch(/postgres\(url, \{ prepare: false \}\)/);
    }
  });
});
