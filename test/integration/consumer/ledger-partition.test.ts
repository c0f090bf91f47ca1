import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pgTransactions } from '../../../src/consumer/index.js';
import { fromPg } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { startFreezeProxy, type FreezeProxy } from '../../helpers/freeze-proxy.js';

/**
 * The statement timeouts of a partition (test/chaos/partition.test.ts), one level down: a
 * statement on a frozen connection fails instead of waiting for good, and the pool drops that
 * connection, so once the network is back the next statement runs on a new one.
 */
let db: TestDatabase;
let proxy: FreezeProxy;
let pool: pg.Pool;
beforeAll(async () => {
  db = await createTestDatabase();
  proxy = await startFreezeProxy(Number(new URL(db.url).port || 5432));
  pool = new pg.Pool({
    connectionString: proxy.url(db.url),
    max: 2,
    connectionTimeoutMillis: 1_000,
  });
  pool.on('error', () => undefined);
});
afterAll(async () => {
  await proxy?.close();
  await pool?.end().catch(() => undefined);
  await db?.drop();
});

describe('statement timeouts on frozen connections', () => {
  it('pgTransactions: a single statement times out, its connection is dropped, the next one works after the heal', async () => {
    const runner = pgTransactions(pool, { statementTimeoutMs: 500 });
    expect((await runner.query<{ one: number }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    expect(pool.totalCount).toBe(1);
    proxy.freeze();
    await expect(runner.query('SELECT 1 AS one')).rejects.toThrow(/timeout/i);
    expect(pool.totalCount).toBe(0); // dropped, not returned to the pool
    proxy.heal();
    expect((await runner.query<{ one: number }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    expect(proxy.counts().frozen).toBe(1); // the old one stays dead
  });

  it('pgTransactions: a ROLLBACK on a frozen connection gives up and the connection is dropped', async () => {
    const runner = pgTransactions(pool, { statementTimeoutMs: 500 });
    const before = proxy.counts().frozen;
    await expect(
      runner.transaction(async (tx) => {
        await tx.query('SELECT 1');
        proxy.freeze();
        throw new Error('handler failed');
      }),
    ).rejects.toThrow('handler failed');
    expect(pool.totalCount).toBe(0);
    proxy.heal();
    expect(proxy.counts().frozen).toBeGreaterThan(before);
    expect((await runner.query<{ one: number }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
  });

  it('fromPg on a pool: timeoutMs rejects the statement and drops its connection', async () => {
    const executor = fromPg(pool);
    await executor.query('SELECT 1');
    proxy.freeze();
    await expect(executor.query('SELECT 2', undefined, { timeoutMs: 300 })).rejects.toThrow(
      /timeout/i,
    );
    proxy.heal();
    expect((await executor.query<{ n: number }>('SELECT 3 AS n')).rows).toEqual([{ n: 3 }]);
  });
});
