import { describe, expect, it } from 'vitest';
import { globMatcher, globToLike } from '../../../src/fleet/glob.js';
import { databaseUrlWithName, redactDatabaseUrl } from '../../../src/fleet/url.js';

describe('tenant globs', () => {
  it('turns * and ? into LIKE wildcards and escapes LIKE’s own', () => {
    expect(globToLike('tenant_*')).toBe('tenant\\_%');
    expect(globToLike('t?%\\')).toBe('t_\\%\\\\');
  });
  it('matches exactly as the LIKE pattern does, _ literal', () => {
    const m = globMatcher('tenant_*');
    expect(m('tenant_1')).toBe(true);
    expect(m('tenant_')).toBe(true);
    expect(m('tenantX1')).toBe(false);
    expect(m('my_tenant_1')).toBe(false);
    expect(globMatcher('t?')('t1')).toBe(true);
    expect(globMatcher('t?')('t12')).toBe(false);
    expect(globMatcher('a.b*')('aXb')).toBe(false);
  });
});

describe('fleet URLs', () => {
  it('swaps the database of single- and multi-host URLs, keeping the query', () => {
    expect(databaseUrlWithName('postgres://u:p@h:5432/postgres?sslmode=require', 'tenant 1')).toBe(
      'postgres://u:p@h:5432/tenant%201?sslmode=require',
    );
    expect(
      databaseUrlWithName('postgres://h1:5432,h2:5433/app?target_session_attrs=read-write', 't'),
    ).toBe('postgres://h1:5432,h2:5433/t?target_session_attrs=read-write');
    expect(databaseUrlWithName('postgres://h', 't')).toBe('postgres://h/t');
  });
  it('masks the password', () => {
    expect(redactDatabaseUrl('postgres://u:secret@h/db')).toBe('postgres://u:***@h/db');
    expect(redactDatabaseUrl('postgres://h/db')).toBe('postgres://h/db');
  });
});
