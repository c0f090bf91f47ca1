import { readFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  fromPg,
  LATEST_VERSION,
  migrate,
  MIGRATIONS,
  OutboxSchemaError,
  OutboxValidationError,
  assertSchemaCurrent,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { runCli } from '../../helpers/run-cli.js';
import { dumpSchema } from '../../helpers/schema-dump.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
});
afterAll(() => db.drop());

async function withClient<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

describe('migrations', () => {
  it('an unmigrated schema is reported with the command to run', async () => {
    await withClient(async (client) => {
      const error = await assertSchemaCurrent(fromPg(client), 'never_migrated').catch(
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(OutboxSchemaError);
      expect((error as Error).message).toMatch(/outbox migrate --schema never_migrated/);
    });
  });

  it('two concurrent `outbox migrate` processes both succeed and the schema is applied once', async () => {
    const args = ['migrate', '--database-url', db.url, '--schema', 'concurrent', '--json'];
    const [a, b] = await Promise.all([runCli(args), runCli(args)]);
    expect(a.stderr).toBe('');
    expect(b.stderr).toBe('');
    expect([a.code, b.code]).toEqual([0, 0]);
    const results = [JSON.parse(a.stdout), JSON.parse(b.stdout)] as {
      applied: unknown[];
      version: number;
    }[];
    // Exactly one of them applied the migrations; the other found them done.
    expect(results.map((r) => r.applied.length).sort()).toEqual([0, MIGRATIONS.length]);
    expect(results.every((r) => r.version === LATEST_VERSION)).toBe(true);
    const rows = await withClient((c) =>
      c.query(
        'SELECT version, count(*)::int AS n FROM concurrent.outbox_migrations GROUP BY version',
      ),
    );
    expect(rows.rows.every((r) => r.n === 1)).toBe(true);
    expect(rows.rows).toHaveLength(MIGRATIONS.length);
  });

  it('is idempotent: a second run applies nothing and changes nothing', async () => {
    await withClient(async (client) => {
      const first = await migrate(fromPg(client), { schema: 'idem' });
      expect(first.applied.length).toBe(MIGRATIONS.length);
      const before = await dumpSchema(fromPg(client), 'idem');
      const second = await migrate(fromPg(client), { schema: 'idem' });
      expect(second.applied).toEqual([]);
      expect(await dumpSchema(fromPg(client), 'idem')).toBe(before);
      await expect(assertSchemaCurrent(fromPg(client), 'idem')).resolves.toBeUndefined();
    });
  });

  it('a failing migration leaves nothing behind (one transaction)', async () => {
    await withClient(async (client) => {
      const broken = [
        ...MIGRATIONS,
        {
          version: 999,
          name: 'broken',
          up: () => ['CREATE TABLE will_vanish (x int)', 'SELECT no_such_function()'],
        },
      ];
      await expect(
        migrate(fromPg(client), { schema: 'broken', migrations: broken }),
      ).rejects.toThrow(/no_such_function/);
      const { rows } = await client.query(
        `SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = 'broken'`,
      );
      expect(rows[0].n).toBe(0);
    });
  });

  it('rejects an invalid schema name without touching the database', async () => {
    let calls = 0;
    const executor = { query: async () => (calls++, { rows: [] }) };
    await expect(migrate(executor, { schema: 'x; DROP SCHEMA public' })).rejects.toBeInstanceOf(
      OutboxValidationError,
    );
    expect(calls).toBe(0);
  });

  it('schema drift: the migrated catalog matches the committed snapshot', async () => {
    const expected = readFileSync(
      new URL('../../schema/schema.snapshot.txt', import.meta.url),
      'utf8',
    );
    const actual = await withClient(async (client) => {
      await migrate(fromPg(client), { schema: 'drift' });
      return dumpSchema(fromPg(client), 'drift');
    });
    // On mismatch: if the change is intended, run `npm run schema:dump` and commit the snapshot.
    expect(actual).toBe(expected);
  });
});
