import { describe, expect, it } from 'vitest';
import { isSqliteUrl, sqliteFilePath } from '../../../../src/stores/sqlite/sqlite-url.js';

describe('SQLite URLs', () => {
  it('reads the file forms Prisma, libSQL and sqlite: users write', () => {
    expect(sqliteFilePath('file:./agent.db')).toBe('./agent.db');
    expect(sqliteFilePath('file:agent.db')).toBe('agent.db');
    expect(sqliteFilePath('file:///var/lib/agent.db')).toBe('/var/lib/agent.db');
    expect(sqliteFilePath('file://localhost/var/lib/agent.db')).toBe('/var/lib/agent.db');
    expect(sqliteFilePath('sqlite:./agent.db')).toBe('./agent.db');
    expect(sqliteFilePath('sqlite:///tmp/a%20b.db')).toBe('/tmp/a b.db');
    expect(sqliteFilePath('file:./agent.db?connection_limit=1')).toBe('./agent.db');
  });

  it('tells a SQLite URL from a Postgres one, and refuses one with no file', () => {
    expect(isSqliteUrl('file:./agent.db')).toBe(true);
    expect(isSqliteUrl('SQLITE:./agent.db')).toBe(true);
    expect(isSqliteUrl('postgres://app@db/app')).toBe(false);
    expect(isSqliteUrl('/var/run/postgresql')).toBe(false);
    expect(() => sqliteFilePath('file:')).toThrow(/no file/);
    expect(() => sqliteFilePath('postgres://x/y')).toThrow(/not a SQLite URL/);
  });
});
