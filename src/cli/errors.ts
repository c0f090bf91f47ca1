import { currentDatabaseUrl } from './database.js';

/**
 * What the CLI says for the database errors a user meets first — the server is not there, the
 * login is wrong, the outbox is not migrated — instead of the driver's bare text
 * (`connect ECONNREFUSED 127.0.0.1:5432`, `relation "public.outbox" does not exist`): which URL
 * (password masked) and what to check. Undefined for any other error.
 */
export function explainDatabaseError(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const { code, message } = error as { code?: unknown; message?: unknown };
  const text = typeof message === 'string' ? message : '';
  const url = currentDatabaseUrl() ?? 'the database';
  switch (code) {
    case 'ECONNREFUSED':
      return `cannot connect to ${url}: connection refused. Check that PostgreSQL is running and listening on that host and port.`;
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `cannot connect to ${url}: the host name does not resolve (${text}). Check the host part of the URL.`;
    case 'ETIMEDOUT':
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return `cannot connect to ${url}: ${text}. Check the host, the port and any firewall between.`;
    case '28P01':
    case '28000':
      return `cannot log in to ${url}: ${text}. Check the user name and password in the URL.`;
    case '3D000':
      return `cannot connect to ${url}: ${text}. Create it (createdb), or fix the database name in the URL.`;
    case '42P01':
    case '3F000':
      if (/outbox/.test(text))
        return `${text} in ${url}: the outbox tables are not there. Run \`outbox migrate\` with the same --database-url (and --schema) first.`;
      return undefined;
    default:
      return undefined;
  }
}
