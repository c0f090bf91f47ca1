import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { fromPg } from '../src/store/from-pg.js';
import { migrate } from '../src/migrations/migrate.js';
import { obtainPostgres } from './helpers/postgres-server.js';
import { withDatabase } from './helpers/url.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Admin URL (database `postgres`) of the server the suite runs on. */
    adminDatabaseUrl: string;
    /** Migrated database every test database is cloned from. */
    templateDatabase: string;
    /** Prefix of every database this run creates (dropped at the end). */
    databasePrefix: string;
    /** That server's `wal_level`: below `logical`, CDC tests start their own (logical-database.ts). */
    walLevel: string;
  }
}

/**
 * Finds (or starts) Postgres, builds one migrated template database, and gives each test file a
 * clone of it (see helpers/database.ts): cloning is ~50 ms, migrating per file would be slower and
 * would let files see each other's rows.
 */
export default async function setup(project: TestProject) {
  const server = await obtainPostgres();
  console.log(`[agent-outbox tests] PostgreSQL from ${server.source}`);
  const prefix = `ao_test_${process.pid}_${Date.now().toString(36)}`;
  const template = `${prefix}_template`;
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  const walLevel = (await admin.query<{ wal_level: string }>('SHOW wal_level')).rows[0]!.wal_level;
  if (walLevel !== 'logical')
    console.log(
      `[agent-outbox tests] that PostgreSQL has wal_level=${walLevel}: test files that need logical decoding (CDC) start a private one with wal_level=logical`,
    );
  await admin.query(`CREATE DATABASE ${template}`);
  const templateClient = new pg.Client({ connectionString: withDatabase(server.url, template) });
  await templateClient.connect();
  await migrate(fromPg(templateClient), { engine: 'claims' });
  await templateClient.end();

  project.provide('adminDatabaseUrl', server.url);
  project.provide('templateDatabase', template);
  project.provide('databasePrefix', prefix);
  project.provide('walLevel', walLevel);

  return async () => {
    const { rows } = await admin.query<{ datname: string }>(
      `SELECT datname FROM pg_database WHERE datname LIKE $1`,
      [`${prefix}%`],
    );
    for (const { datname } of rows) {
      await admin.query(`DROP DATABASE IF EXISTS "${datname}" WITH (FORCE)`).catch(() => undefined);
    }
    await admin.end();
    await server.stop();
  };
}
