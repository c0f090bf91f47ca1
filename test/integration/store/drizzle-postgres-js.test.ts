import { drizzle, type PostgresJsQueryResultHKT } from 'drizzle-orm/postgres-js';
import postgres from 'postgres';
import { afterAll, beforeAll } from 'vitest';
import { createTestDatabase } from '../../helpers/database.js';
import { describeAgentContract } from './agent-contract.js';
import { describeConsumerContract } from './consumer-contract.js';
import { drizzleHarness, type DrizzleTx } from './drizzle-harness.js';
import { describeEnqueueContract } from './enqueue-contract.js';
import {
  BUSINESS_TABLES_SQL,
  closeAndDrop,
  ORM_APPLICATION_NAME,
  type OrmContext,
} from './orm-harness.js';

let context: OrmContext<DrizzleTx<PostgresJsQueryResultHKT>>;

beforeAll(async () => {
  const db = await createTestDatabase();
  await db.pool.query(BUSINESS_TABLES_SQL);
  const sql = postgres(db.url, {
    max: 6,
    onnotice: () => undefined,
    connection: { application_name: ORM_APPLICATION_NAME },
  });
  // A named statement makes Drizzle ask postgres.js to prepare it: the INSERT is prepared here too.
  const orm = drizzleHarness(drizzle(sql), { preparesInsert: true, close: () => sql.end() });
  context = { db, orm };
});
afterAll(() => closeAndDrop(context));

describeEnqueueContract('Drizzle (postgres-js)', () => context);
describeAgentContract('Drizzle (postgres-js)', () => context);
describeConsumerContract('Drizzle (postgres-js)', () => context);
