import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  endPoolBounded,
  settleWithin,
  trackPoolConnections,
} from '../../../src/cli/dispatch/pool-shutdown.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { startFreezeProxy, type FreezeProxy } from '../../helpers/freeze-proxy.js';

let db: TestDatabase;
let proxy: FreezeProxy;
beforeAll(async () => {
  db = await createTestDatabase();
  proxy = await startFreezeProxy(Number(new URL(db.url).port || 5432));
});
afterAll(async () => {
  await proxy?.close();
  await db?.drop();
});

describe('endPoolBounded (outbox dispatch shutdown)', () => {
  it('ends a pool whose idle connections froze: destroys what does not close within the grace', async () => {
    const pool = new pg.Pool({ connectionString: proxy.url(db.url), max: 3 });
    pool.on('error', () => undefined);
    const open = trackPoolConnections(pool);
    const clients = await Promise.all([pool.connect(), pool.connect(), pool.connect()]);
    for (const client of clients) await client.query('SELECT 1');
    for (const client of clients) client.release();
    expect(open.size).toBe(3);
    proxy.freeze();
    // pg's own end() waits for a FIN the partition dropped: it never returns.
    const stuck = clients[0]!;
    const ended = await Promise.race([
      new Promise((resolve) => stuck.once('end', () => resolve('closed'))),
      pool
        .end()
        .then(() => new Promise((resolve) => setTimeout(() => resolve('still open'), 1_000))),
    ]);
    expect(ended).toBe('still open');
    expect(open.size).toBe(3);
    await endPoolBounded(pool, open, 200);
    await expect.poll(() => open.size, { timeout: 10_000 }).toBe(0);
    proxy.heal();
  });

  it('ends a pool whose connections are live without waiting for the grace', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    const open = trackPoolConnections(pool);
    await pool.query('SELECT 1');
    expect(open.size).toBe(1);
    let graceOver = false;
    const timer = setTimeout(() => (graceOver = true), 20_000);
    await endPoolBounded(pool, open, 20_000);
    clearTimeout(timer);
    expect(graceOver).toBe(false);
    expect(open.size).toBe(0);
  });

  it('settleWithin gives up on work that never settles', async () => {
    await settleWithin(new Promise(() => undefined), 10);
    await settleWithin(Promise.reject(new Error('ignored')), 10_000);
  });
});
