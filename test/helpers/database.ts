import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { withDatabase } from './url.js';

/** A fresh database cloned from the migrated template, with a pool on it. */
export interface TestDatabase {
  name: string;
  url: string;
  pool: pg.Pool;
  /** Closes the pool and drops the database. */
  drop(): Promise<void>;
}

async function admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: inject('adminDatabaseUrl') });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/**
 * Creates a database for one test file (or one test). `migrated: false` gives an empty database,
 * for migration tests.
 */
export async function createTestDatabase(
  options: { migrated?: boolean } = {},
): Promise<TestDatabase> {
  const name = `${inject('databasePrefix')}_${randomBytes(4).toString('hex')}`;
  const template = options.migrated === false ? 'template0' : inject('templateDatabase');
  await admin(async (client) => {
    // Two clones at the same instant can collide on the template ("being accessed by other
    // users"); retry briefly.
    for (let attempt = 0; ; attempt++) {
      try {
        await client.query(`CREATE DATABASE "${name}" TEMPLATE "${template}"`);
        return;
      } catch (error) {
        if ((error as { code?: string }).code !== '55006' || attempt > 20) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100 + Math.random() * 200));
      }
    }
  });
  const url = withDatabase(inject('adminDatabaseUrl'), name);
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  pool.on('error', () => undefined);
  return {
    name,
    url,
    pool,
    drop: async () => {
      await pool.end();
      await admin((client) => client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`));
    },
  };
}
