import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { pruneOutbox } from '../../../src/retention/prune-outbox.js';
import { fromPg } from '../../../src/store/from-pg.js';
import type { SqlExecutor } from '../../../src/store/sql-executor.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';

/**
 * Retention of the lanes engine compresses the full-page images of its DELETEs (migration 034,
 * sql/lane-archive.ts `pruneWalCompression`): read from the WAL itself (pg_walinspect), the
 * images of `outbox_lane_messages`' pages that a prune after a CHECKPOINT writes. Where the role
 * may not change `wal_compression`, or `agent_outbox.prune_wal_compression` is off, the prune
 * runs as before, uncompressed, and does not fail.
 */
let db: TestDatabase;
let walinspect = true;
beforeEach(async () => {
  db = await createTestDatabase();
  try {
    await db.pool.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
  } catch (error) {
    // An embedded server without contrib: nothing to read the WAL with.
    const reason = `pg_walinspect is not available (${(error as Error).message})`;
    if (process.env.CI === 'true') throw new Error(`${reason}, and CI=true requires it`);
    console.warn(`skipping: ${reason}`);
    walinspect = false;
  }
});
afterEach(async () => {
  await db.drop();
});

const HOUR = 3_600_000;
const MESSAGES = 600;

/** Consumed lane messages, aged past retention, with a CHECKPOINT after them. */
async function consumedAndCheckpointed(): Promise<void> {
  await enqueueLanes(
    db.pool,
    Array.from({ length: MESSAGES }, (_, i) => ({
      topic: 'mail.send',
      aggregateId: `order-${i % 50}`,
      payload: { n: i, template: 'receipt', to: `customer-${i}@example.com` },
    })),
  );
  const publisher = new InMemoryPublisher();
  await createLaneDispatcher({ executor: fromPg(db.pool), publisher }).drain();
  expect(publisher.published).toHaveLength(MESSAGES);
  await db.pool.query(`UPDATE outbox_lane_messages SET created_at = now() - interval '2 hours'`);
  await db.pool.query('CHECKPOINT');
}

/** The full-page images of `outbox_lane_messages` that `prune` wrote, with their method. */
async function imagesOfPrune(prune: () => Promise<number>) {
  const { rows: rel } = await db.pool.query<{ db: string; node: string }>(
    `SELECT (SELECT oid FROM pg_database WHERE datname = current_database())::text AS db,
            pg_relation_filenode('outbox_lane_messages')::text AS node`,
  );
  const lsn = async () =>
    (await db.pool.query<{ l: string }>('SELECT pg_current_wal_flush_lsn()::text AS l')).rows[0]!.l;
  const start = await lsn();
  const removed = await prune();
  const end = await lsn();
  const { rows } = await db.pool.query<{ fpi: number; method: string | null }>(
    `SELECT fpi_length AS fpi, substring(block_ref FROM 'method: ([a-z0-9]+)') AS method
     FROM pg_get_wal_records_info($1, $2)
     WHERE fpi_length > 0 AND block_ref LIKE $3`,
    [start, end, `%rel %/${rel[0]!.db}/${rel[0]!.node} fork main %(FPW)%`],
  );
  return { removed, images: rows };
}

const prune = (executor: SqlExecutor) => async () =>
  (await pruneOutbox(executor, { olderThanMs: HOUR })).removed;

describe('lanes engine: retention compresses its full-page images', () => {
  it('a superuser prune writes its images with lz4, a fraction of a page each', async () => {
    if (!walinspect) return;
    await consumedAndCheckpointed();
    const { removed, images } = await imagesOfPrune(prune(fromPg(db.pool)));
    expect(removed).toBe(MESSAGES);
    // One image a page of messages (hundreds of bytes of rows each): several pages here.
    expect(images.length).toBeGreaterThan(3);
    expect(images.every((image) => image.method === 'lz4')).toBe(true);
    expect(Math.max(...images.map((image) => image.fpi))).toBeLessThan(4096);
    // The caller's session keeps its own setting: the function's SET clause restored it.
    const { rows } = await db.pool.query<{ c: string }>(
      `SELECT current_setting('wal_compression') AS c`,
    );
    expect(rows[0]!.c).toBe('off');
  });

  it('agent_outbox.prune_wal_compression = off leaves them whole', async () => {
    if (!walinspect) return;
    await consumedAndCheckpointed();
    const client = await db.pool.connect();
    try {
      await client.query(`SET agent_outbox.prune_wal_compression = 'off'`);
      const { removed, images } = await imagesOfPrune(prune(fromPg(client)));
      expect(removed).toBe(MESSAGES);
      expect(images.length).toBeGreaterThan(3);
      expect(images.every((image) => image.method === null)).toBe(true);
      expect(Math.max(...images.map((image) => image.fpi))).toBeGreaterThan(4096);
    } finally {
      client.release();
    }
  });

  it('a role that may not set wal_compression prunes as before, uncompressed', async () => {
    if (!walinspect) return;
    await consumedAndCheckpointed();
    // Roles are the server's, not the database's: a name of this run, dropped after.
    const role = `ao_prune_${process.pid}_${Date.now()}`;
    await db.pool.query(`CREATE ROLE ${role}`);
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      await db.pool.query(
        `GRANT USAGE ON SCHEMA public TO ${role};
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${role}`,
      );
      await client.query(`SET ROLE ${role}`);
      const { removed, images } = await imagesOfPrune(prune(fromPg(client)));
      expect(removed).toBe(MESSAGES);
      expect(images.length).toBeGreaterThan(3);
      expect(images.every((image) => image.method === null)).toBe(true);
    } finally {
      await client.end();
      await db.pool.query(`DROP OWNED BY ${role}`);
      await db.pool.query(`DROP ROLE ${role}`);
    }
  });
});
