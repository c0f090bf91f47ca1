/**
 * Rewrites test/schema/schema.snapshot.txt from a scratch database migrated with every
 * migration. Run after adding a migration: `npm run schema:dump` (uses DATABASE_URL or
 * 127.0.0.1:5432), then review the diff.
 */
import { writeFileSync } from 'node:fs';
import pg from 'pg';
import { migrate } from '../src/migrations/migrate.js';
import { fromPg } from '../src/store/from-pg.js';
import { dumpSchema } from '../test/helpers/schema-dump.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const client = new pg.Client({ connectionString: url });
await client.connect();
const schema = `schema_dump_${process.pid}`;
try {
  await migrate(fromPg(client), { schema });
  const text = await dumpSchema(fromPg(client), schema);
  writeFileSync(new URL('../test/schema/schema.snapshot.txt', import.meta.url), text);
  console.log(`wrote test/schema/schema.snapshot.txt (${text.split('\n').length - 1} lines)`);
} finally {
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await client.end();
}
