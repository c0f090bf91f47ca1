import pg from 'pg';
import { fromPg } from '../store/from-pg.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { UsageError } from './usage-error.js';

/** `--database-url` wins over `DATABASE_URL`; one of them is required. */
export function resolveDatabaseUrl(flag: string | undefined): string {
  const url = flag ?? process.env.DATABASE_URL;
  if (!url) {
    throw new UsageError(
      'no database: pass --database-url postgres://user@host:5432/db or set DATABASE_URL',
    );
  }
  return url;
}

/** A single connection (migrations need BEGIN/COMMIT on one session). */
export async function connect(
  url: string,
): Promise<{ client: pg.Client; executor: SqlExecutor; close(): Promise<void> }> {
  const client = new pg.Client({ connectionString: url, application_name: 'agent-outbox-cli' });
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
    return '<unparseable database url>';
  }
}
