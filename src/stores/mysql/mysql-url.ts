/**
 * `--database-url` forms that name a MySQL or MariaDB database: `mysql://user:pass@host:3306/db`
 * and `mariadb://…` (the same protocol; what Prisma and Drizzle users write).
 */
export function isMysqlUrl(url: string): boolean {
  return /^(mysql|mariadb):\/\//i.test(url);
}

/**
 * The URL as mysql2 takes it (`mysql://`): `mariadb://` becomes `mysql://`, the rest is kept
 * (user, password, host, port, database, query options).
 */
export function mysqlDriverUrl(url: string): string {
  if (!isMysqlUrl(url)) throw new TypeError(`not a MySQL URL: ${url}`);
  const parsed = new URL(url.replace(/^mariadb:/i, 'mysql:'));
  if (parsed.pathname.length <= 1)
    throw new TypeError(
      `no database in MySQL URL ${redactMysqlUrl(url)}: add /dbname after the host`,
    );
  return parsed.toString();
}

/** The URL with its password replaced by `***`, for messages and logs. */
export function redactMysqlUrl(url: string): string {
  return url.replace(/\/\/([^:/@]+):[^@/]*@/, '//$1:***@');
}
