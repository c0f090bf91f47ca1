import { afterAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import pg from 'pg';
import { LATEST_VERSION } from '../../../src/index.js';
import { runCli } from '../../helpers/run-cli.js';
import { commitMessages, tenantFamily } from '../../helpers/tenant-databases.js';

const family = tenantFamily();
afterAll(() => family.dropAll());

async function sql(url: string, text: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(text);
  } finally {
    await client.end();
  }
}

describe('outbox migrate / status --databases', () => {
  it('migrates every matching database with a line each, goes on past a failure and exits 1 naming it', async () => {
    for (let n = 0; n < 4; n++) await family.create(n, { migrated: false });
    // Tenant 2 cannot be migrated: a table of its own is in the way of the outbox's.
    await sql(family.url(family.name(2)), 'CREATE TABLE outbox_migrations (v text)');
    const result = await runCli([
      'migrate',
      '--database-url',
      inject('adminDatabaseUrl'),
      '--databases',
      family.glob,
      '--engine',
      'claims',
    ]);
    expect(result.code, result.stderr).toBe(1);
    expect(result.stdout).toContain(`Migrating 4 databases matching "${family.glob}"`);
    for (const n of [0, 1, 3])
      expect(result.stdout).toMatch(
        new RegExp(
          `\\[\\d/4\\] ${family.name(n)}: applied \\d+ migration\\(s\\), now at version ${LATEST_VERSION}`,
        ),
      );
    expect(result.stdout).toMatch(new RegExp(`\\[3/4\\] ${family.name(2)}: FAILED`));
    expect(result.stderr).toContain(`1 of 4 databases failed`);
    expect(result.stderr).toContain(family.name(2));

    // Again, as JSON: the three are current, the fourth still fails.
    const again = await runCli([
      'migrate',
      '--database-url',
      inject('adminDatabaseUrl'),
      '--databases',
      family.glob,
      '--engine',
      'claims',
      '--json',
    ]);
    expect(again.code).toBe(1);
    const json = JSON.parse(again.stdout) as {
      databases: { database: string; ok: boolean; applied?: number; error?: string }[];
      failed: number;
    };
    expect(json.failed).toBe(1);
    expect(json.databases.filter((d) => d.ok).map((d) => d.applied)).toEqual([0, 0, 0]);
    expect(json.databases.find((d) => !d.ok)?.database).toBe(family.name(2));
  });

  it('shows one line per database, worst first', async () => {
    await family.drop(family.name(2));
    // 0: two pending, written now; 1: one pending, an hour old; 3: nothing pending, a dead letter.
    await commitMessages(family.url(family.name(0)), [
      { topic: 't', aggregateId: 'a', payload: {} },
      { topic: 't', aggregateId: 'b', payload: {} },
    ]);
    await commitMessages(family.url(family.name(1)), [
      { topic: 't', aggregateId: 'a', payload: {} },
    ]);
    await sql(
      family.url(family.name(1)),
      `UPDATE outbox SET created_at = now() - interval '1 hour'`,
    );
    await commitMessages(family.url(family.name(3)), [
      { topic: 't', aggregateId: 'a', payload: {} },
    ]);
    await sql(
      family.url(family.name(3)),
      `UPDATE outbox SET dead_lettered_at = now(), last_error = 'refused'`,
    );
    const result = await runCli([
      'status',
      '--database-url',
      inject('adminDatabaseUrl'),
      '--databases',
      family.glob,
      '--json',
    ]);
    expect(result.code, result.stderr).toBe(0);
    const { databases } = JSON.parse(result.stdout) as {
      databases: {
        database: string;
        pending: number;
        oldestPendingAgeSeconds: number;
        deadLetters: number;
      }[];
    };
    expect(databases.map((d) => d.database)).toEqual([
      family.name(1),
      family.name(0),
      family.name(3),
    ]);
    expect(databases[0]!.oldestPendingAgeSeconds).toBeGreaterThan(3_500);
    expect(databases[1]!.pending).toBe(2);
    expect(databases[2]!.deadLetters).toBe(1);

    const text = await runCli([
      'status',
      '--database-url',
      inject('adminDatabaseUrl'),
      '--databases',
      family.glob,
    ]);
    expect(text.code).toBe(0);
    const lines = text.stdout.trim().split('\n');
    expect(lines[0]).toBe(`3 databases matching "${family.glob}", worst first`);
    expect(lines[1]).toMatch(/^DATABASE\s+PENDING\s+OLDEST\s+DEAD\s+DUE/);
    expect(lines[2]).toMatch(new RegExp(`^${family.name(1)}\\s+1\\s+60\\.\\dm`));
  });
});
