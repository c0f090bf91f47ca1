import type pg from 'pg';
import { fromPg } from '../store/from-pg.js';
import { createPgClient } from '../store/multi-host-pool.js';
import { parseMultiHostUrl, redactDatabaseUrl } from '../store/multi-host-url.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { UsageError } from './usage-error.js';

/** The database URL the running command resolved last (for error messages: see errors.ts). */
let resolvedUrl: string | undefined;

/** The URL of the last {@link resolveDatabaseUrl}, password masked, or undefined. */
export function currentDatabaseUrl(): string | undefined {
  return resolvedUrl === undefined ? undefined : redactUrl(resolvedUrl);
}

/**
 * `--database-url` wins over `DATABASE_URL`; one of them is required, and it must be a
 * PostgreSQL URL (`postgres://` or `postgresql://`, or a socket path): a typo such as
 * `postgress://` or a bare word would otherwise reach `pg`, which reads it as a host name and
 * answers `getaddrinfo ENOTFOUND base`. Several hosts (libpq's
 * `postgres://h1:5432,h2:5433/app?target_session_attrs=read-write`) are fine: see
 * store/multi-host-pool.ts.
 */
export function resolveDatabaseUrl(flag: string | undefined): string {
  const url = flag ?? process.env.DATABASE_URL;
  const from = flag === undefined ? 'DATABASE_URL' : '--database-url';
  if (!url) {
    throw new UsageError(
      'no database: pass --database-url postgres://user@host:5432/db or set DATABASE_URL',
    );
  }
  if (url.startsWith('/')) return (resolvedUrl = url);
  try {
    // Several hosts, which URL cannot parse; one host goes on to the checks below.
    if (parseMultiHostUrl(url)?.plain === false) return (resolvedUrl = url);
  } catch (error) {
    throw new UsageError(`${from} ${redactUrl(url)}: ${(error as Error).message}`);
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(
      `${from} "${url.includes('@') ? '<redacted>' : url}" is not a URL: expected postgres://user:password@host:5432/database`,
    );
  }
  if (
    parsed.protocol !== 'postgres:' &&
    parsed.protocol !== 'postgresql:' &&
    parsed.protocol !== 'socket:'
  ) {
    const scheme = parsed.protocol.slice(0, -1);
    const hint = /^postgre/i.test(scheme) ? ' (a typo?)' : '';
    throw new UsageError(
      `${from} ${redactUrl(url)} has the scheme "${scheme}://"${hint}: a PostgreSQL URL starts with postgres:// or postgresql:// (also accepted: mysql:// or mariadb:// for MySQL, file: for SQLite)`,
    );
  }
  return (resolvedUrl = url);
}

/** A single connection (migrations need BEGIN/COMMIT on one session). */
export async function connect(
  url: string,
): Promise<{ client: pg.Client; executor: SqlExecutor; close(): Promise<void> }> {
  const client = createPgClient(url, { application_name: 'agent-outbox-cli' });
  // An unhandled 'error' event (server restart while idle) would crash the process.
  client.on('error', () => undefined);
  await client.connect();
  return { client, executor: fromPg(client), close: () => client.end() };
}

/** Removes the password from a connection string before printing it. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    // Several hosts, which URL cannot parse.
    return redactDatabaseUrl(url) ?? '<unparseable database url>';
  }
}
