import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOutbox, fromDrizzle } from '../../../src/index.js';
import { createTestDatabase } from '../../helpers/database.js';
import { describeAgentContract } from './agent-contract.js';
import { describeConsumerContract } from './consumer-contract.js';
import { drizzleHarness, type DrizzleTx } from './drizzle-harness.js';
import { describeEnqueueContract } from './enqueue-contract.js';
import {
  BUSINESS_TABLES_SQL,
  closeAndDrop,
  count,
  ORM_APPLICATION_NAME,
  type OrmContext,
} from './orm-harness.js';
import type { NodePgQueryResultHKT } from 'drizzle-orm/node-postgres';

let context: OrmContext<DrizzleTx<NodePgQueryResultHKT>>;

beforeAll(async () => {
  const db = await createTestDatabase();
  await db.pool.query(BUSINESS_TABLES_SQL);
  const pool = new pg.Pool({
    connectionString: db.url,
    max: 6,
    application_name: ORM_APPLICATION_NAME,
  });
  const orm = drizzleHarness(drizzle(pool), { preparesInsert: true, close: () => pool.end() });
  context = { db, orm };
});
afterAll(() => closeAndDrop(context));

describeEnqueueContract('Drizzle (node-postgres)', () => context);
describeAgentContract('Drizzle (node-postgres)', () => context);
describeConsumerContract('Drizzle (node-postgres)', () => context);

describe('Drizzle (node-postgres) specifics', () => {
  it('preparedStatements: false leaves the INSERT unprepared (PgBouncer in transaction mode)', async () => {
    // A pool of its own: the shared one's connections may have prepared the INSERT already.
    const own = new pg.Pool({
      connectionString: context.db.url,
      max: 1,
      application_name: ORM_APPLICATION_NAME,
    });
    try {
      const prepared = await drizzle(own).transaction(async (tx) => {
        const executor = fromDrizzle(tx, { preparedStatements: false });
        await createOutbox().enqueue(executor, {
          topic: 'order.created',
          aggregateId: 'order:unprepared',
          payload: { ok: true },
        });
        const { rows } = await executor.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM pg_prepared_statements',
        );
        return rows[0]!.n;
      });
      expect(prepared).toBe(0);
      expect(await count(context.db, 'outbox', "aggregate_id = 'order:unprepared'")).toBe(1);
    } finally {
      await own.end();
    }
  });
});
