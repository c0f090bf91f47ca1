import { describe, expect, it } from 'vitest';
import {
  isMysqlUrl,
  mysqlDriverUrl,
  redactMysqlUrl,
} from '../../../../src/stores/mysql/mysql-url.js';

describe('MySQL URLs', () => {
  it('recognises mysql:// and mariadb://, nothing else', () => {
    expect(isMysqlUrl('mysql://root@127.0.0.1:3306/test')).toBe(true);
    expect(isMysqlUrl('MariaDB://root@db/app')).toBe(true);
    expect(isMysqlUrl('postgres://x/y')).toBe(false);
    expect(isMysqlUrl('file:./agent.db')).toBe(false);
  });

  it('gives mysql2 a mysql:// URL and insists on a database', () => {
    expect(mysqlDriverUrl('mariadb://u:p@db:3307/app?ssl=true')).toBe(
      'mysql://u:p@db:3307/app?ssl=true',
    );
    expect(() => mysqlDriverUrl('mysql://root@127.0.0.1:3306')).toThrow(/no database/);
    expect(() => mysqlDriverUrl('mysql://root:secret@127.0.0.1:3306/')).toThrow(/root:\*\*\*@/);
  });

  it('never shows a password', () => {
    expect(redactMysqlUrl('mysql://app:s3cret@db:3306/app')).toBe('mysql://app:***@db:3306/app');
    expect(redactMysqlUrl('mysql://app@db/app')).toBe('mysql://app@db/app');
  });
});
