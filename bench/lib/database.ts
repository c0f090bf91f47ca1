import pg from 'pg';
import { batchTables, ringTables } from '../../src/sql/dispatched-log.js';
import { fromPg, migrate } from '../../src/index.js';

/** A throwaway, migrated database for one bench run, on the same server as every baseline. */
export interface BenchDatabase {
  name: string;
  url: string;
  pool: pg.Pool;
  /** A fresh dedicated client (LISTEN, raw loops). */
  client(): Promise<pg.Client>;
  drop(): Promise<void>;
}

function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

/** `suffix` tells apart several databases of one run (one per latency case). */
export async function createBenchDatabase(suffix?: string): Promise<BenchDatabase> {
  const adminUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  const name = `ao_bench_${process.pid}${suffix ? `_${suffix}` : ''}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = withDatabase(adminUrl, name);
  const migrator = new pg.Client({ connectionString: url });
  await migrator.connect();
  // The claim engine, which the cases that are not about lanes drive (`engine: 'lanes'` cases say so).
  await migrate(fromPg(migrator), { engine: 'claims' });
  await migrator.end();
  const pool = new pg.Pool({ connectionString: url, max: 20 });
  pool.on('error', () => undefined);
  return {
    name,
    url,
    pool,
    async client() {
      const client = new pg.Client({ connectionString: url, keepAlive: true });
      client.on('error', () => undefined);
      await client.connect();
      return client;
    },
    async drop() {
      await pool.end();
      const a = new pg.Client({ connectionString: adminUrl });
      await a.connect();
      const slots = await a.query<{ slot_name: string }>(
        `SELECT slot_name FROM pg_replication_slots WHERE database = $1`,
        [name],
      );
      for (const { slot_name } of slots.rows)
        await a.query('SELECT pg_drop_replication_slot($1)', [slot_name]).catch(() => undefined);
      await a.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await a.end();
    },
  };
}

/** Empties the outbox (between cases) and refreshes statistics so plans are comparable. */
export async function resetOutbox(pool: pg.Pool): Promise<void> {
  await pool.query(
    `TRUNCATE outbox, outbox_aggregates, outbox_waiters, ${[...ringTables('public'), ...batchTables('public')].join(', ')}`,
  );
  await pool.query('VACUUM ANALYZE outbox');
}

/**
 * Inserts `count` pending messages in one statement through the real insert trigger (so
 * sequences are assigned as in production), spread over `aggregates` aggregates round-robin.
 */
export async function seedPending(
  pool: pg.Pool,
  count: number,
  options: { topic: string; aggregates: number },
): Promise<void> {
  await pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload)
     SELECT 'agg-' || (g % $3), $2, jsonb_build_object('n', g)
     FROM generate_series(1, $1) g ORDER BY g`,
    [count, options.topic, options.aggregates],
  );
  await pool.query('VACUUM ANALYZE outbox');
}

/**
 * Starts a measurement from the same state every time: a CHECKPOINT first, so the write phase of
 * a checkpoint that earlier work's WAL triggered (the history case loads gigabytes) does not
 * compete with what we time. What pgbench advises too. Used before every latency case
 * (graphile-worker's included) and before the history measurements.
 */
export async function quiesce(db: BenchDatabase): Promise<void> {
  await db.pool.query('CHECKPOINT');
}
