/**
 * URL surgery by text, not `new URL()`: a libpq multi-host URL
 * (`postgres://h1:5432,h2:5433/app?target_session_attrs=read-write`) is not a WHATWG URL, and a
 * fleet's server URL may be one.
 */
const PARTS = /^([a-z][a-z0-9+.-]*:\/\/[^/?#]*)(\/[^?#]*)?(\?[^#]*)?(#.*)?$/i;

/** The same server and credentials, another database. */
export function databaseUrlWithName(url: string, database: string): string {
  const m = PARTS.exec(url);
  if (!m) throw new Error(`not a postgres:// URL: ${redactDatabaseUrl(url)}`);
  return `${m[1]}/${encodeURIComponent(database)}${m[3] ?? ''}`;
}

/** The URL with its password masked, for logs and labels. */
export function redactDatabaseUrl(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/@]*):[^@/]*@/i, '$1:***@');
}
