import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createPgClient, createPgPool } from '../../../src/store/multi-host-pool.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { closedPort } from '../../helpers/services.js';
import { withHostsBefore } from '../../helpers/url.js';

/**
 * Multi-host URLs on the local server: a closed port listed first, then the real server; the
 * same database made read-only and writable again (what a failover looks like to a connection
 * that remembered its host).
 */
let db: TestDatabase;
let down: string;
beforeAll(async () => {
  db = await createTestDatabase();
  down = `127.0.0.1:${await closedPort()}`;
});
afterAll(() => db?.drop());

/** From the server's admin database, so that no session of the test database is needed. */
async function setReadOnly(on: boolean): Promise<void> {
  const admin = new pg.Client({ connectionString: inject('adminDatabaseUrl') });
  await admin.connect();
  try {
    await admin.query(
      `ALTER DATABASE "${db.name}" SET default_transaction_read_only = ${on ? 'on' : 'off'}`,
    );
    // The setting reaches new sessions only; end the ones open now.
    await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, [
      db.name,
    ]);
  } finally {
    await admin.end();
  }
}

describe('createPgPool on a multi-host URL', () => {
  it('skips a host that is down and lands on the one that answers', async () => {
    const pool = createPgPool(withHostsBefore(db.url, [down], 'read-write'), { max: 2 });
    try {
      const { rows } = await pool.query<{ port: number }>(
        'SELECT inet_server_port() AS port, 1 AS one',
      );
      expect(rows[0]!.port).toBe(Number(new URL(db.url).port || 5432));
      // Again, on a second connection: the host is remembered.
      const [a, b] = await Promise.all([pool.connect(), pool.connect()]);
      a.release();
      b.release();
    } finally {
      await pool.end();
    }
  });

  it('read-write refuses a read-only database, finds it again once writable; read-only takes it', async () => {
    const url = withHostsBefore(db.url, [down], 'read-write');
    const pool = createPgPool(url, { max: 1 });
    pool.on('error', () => undefined);
    try {
      await pool.query('SELECT 1');
      await setReadOnly(true);
      // The pooled connection was terminated (its query may fail, and the pool drops it); the
      // next connect checks the remembered host again: no longer fits; then the search finds
      // no host that does, each saying why.
      const errors: Error[] = [];
      while (!/no host of/.test(String(errors.at(-1))) && errors.length < 4)
        errors.push(
          await pool.query('SELECT 1').then(
            () => new Error('no error'),
            (e: Error) => e,
          ),
        );
      expect(errors.map(String).join('\n')).toMatch(
        /is now a primary that refuses writes \(read-only\).*looks for the host that fits target_session_attrs=read-write/,
      );
      const second = errors.at(-1);
      expect(String(second)).toMatch(/no host of .* fits: 127\.0\.0\.1:\d+: .*ECONNREFUSED/);
      expect(String(second)).toMatch(/is a primary that refuses writes \(read-only\)/);
      expect((second as { code?: string }).code).toBe('08001');

      // Every host answered, each read-only: the database refuses writes, said as a statement
      // would be told (SQLSTATE 25006), which the dispatcher reports as a read-only spell.
      const only = createPgPool(withHostsBefore(db.url, [], 'read-write'), { max: 1 });
      await expect(only.query('SELECT 1')).rejects.toMatchObject({ code: '25006' });
      await only.end();

      const reader = createPgClient(withHostsBefore(db.url, [down], 'read-only'));
      await reader.connect();
      expect((await reader.query('SHOW transaction_read_only')).rows[0]).toEqual({
        transaction_read_only: 'on',
      });
      await reader.end();

      await setReadOnly(false);
      await expect(pool.query('SELECT 1 AS one')).resolves.toMatchObject({ rows: [{ one: 1 }] });
    } finally {
      await setReadOnly(false);
      await pool.end();
    }
  });

  it('standby and prefer-standby on a primary: none fits, and any host does', async () => {
    const standby = createPgPool(withHostsBefore(db.url, [down], 'standby'), { max: 1 });
    await expect(standby.query('SELECT 1')).rejects.toThrow(/is a read-write primary/);
    await standby.end();
    const prefer = createPgPool(withHostsBefore(db.url, [down], 'prefer-standby'), { max: 1 });
    await expect(prefer.query('SELECT 1 AS one')).resolves.toMatchObject({ rows: [{ one: 1 }] });
    await prefer.end();
  });

  it('a one-host URL is plain pg', () => {
    const pool = createPgPool(db.url);
    expect(pool).toBeInstanceOf(pg.Pool);
    expect((pool as unknown as { Client: unknown }).Client).toBe(pg.Client);
    void pool.end();
  });
});
