import { describe, expect, it } from 'vitest';
import { parseMultiHostUrl, redactDatabaseUrl } from '../../../src/store/multi-host-url.js';

describe('parseMultiHostUrl', () => {
  it('reads the hosts in order, the target, and gives each host a URL pg reads', () => {
    const url = parseMultiHostUrl(
      'postgres://app:s3cret@h1:5432,h2,[::1]:5433/orders?sslmode=prefer&target_session_attrs=read-write&application_name=x',
    )!;
    expect(url.hosts).toEqual([
      { host: 'h1', port: 5432 },
      { host: 'h2', port: undefined },
      { host: '::1', port: 5433 },
    ]);
    expect(url.targetSessionAttrs).toBe('read-write');
    expect(url.plain).toBe(false);
    expect(url.urlFor(url.hosts[1]!)).toBe(
      'postgres://app:s3cret@h2/orders?sslmode=prefer&application_name=x',
    );
    expect(url.urlFor(url.hosts[2]!)).toBe(
      'postgres://app:s3cret@[::1]:5433/orders?sslmode=prefer&application_name=x',
    );
  });

  it('one host without a target is plain: pg gets it as it is', () => {
    expect(parseMultiHostUrl('postgresql://u@localhost:5432/db')!.plain).toBe(true);
    expect(parseMultiHostUrl('postgres://u@h/db?target_session_attrs=any')!.plain).toBe(true);
    // One host but a target pg cannot check: ours to check.
    expect(parseMultiHostUrl('postgres://u@h/db?target_session_attrs=primary')!.plain).toBe(false);
  });

  it('every libpq target is taken; others are refused with the list', () => {
    for (const target of ['any', 'read-write', 'read-only', 'primary', 'standby', 'prefer-standby'])
      expect(
        parseMultiHostUrl(`postgres://h1,h2/db?target_session_attrs=${target}`)!.targetSessionAttrs,
      ).toBe(target);
    expect(() => parseMultiHostUrl('postgres://h1,h2/db?target_session_attrs=master')).toThrow(
      /target_session_attrs=master is not one of any, read-write/,
    );
  });

  it('refuses a port that is not one', () => {
    expect(() => parseMultiHostUrl('postgres://h1:5432,h2:54x/db')).toThrow(
      /"h2:54x" has the port "54x"/,
    );
    expect(() => parseMultiHostUrl('postgres://h1:70000,h2/db')).toThrow(/from 1 to 65535/);
  });

  it('leaves other shapes to the caller', () => {
    expect(parseMultiHostUrl('/var/run/postgresql')).toBeUndefined();
    expect(parseMultiHostUrl('mysql://h1,h2/db')).toBeUndefined();
  });
});

describe('redactDatabaseUrl', () => {
  it('masks the password whatever the number of hosts', () => {
    expect(redactDatabaseUrl('postgres://app:s3cret@h1:5432,h2:5433/db?x=1')).toBe(
      'postgres://app:***@h1:5432,h2:5433/db?x=1',
    );
    expect(redactDatabaseUrl('postgres://app@h1,h2/db')).toBe('postgres://app@h1,h2/db');
    expect(redactDatabaseUrl('not a url')).toBeUndefined();
  });
});
