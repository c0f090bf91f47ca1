/** Same server and credentials, another database. */
export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

/**
 * `url` with more hosts (`host:port` each) listed before its own and `target_session_attrs`
 * set: libpq's multi-host syntax, `postgres://h1:5432,h2:5433/db?target_session_attrs=read-write`.
 */
export function withHostsBefore(url: string, hosts: string[], target: string): string {
  const parsed = new URL(url);
  const auth = parsed.username
    ? `${parsed.username}${parsed.password ? `:${parsed.password}` : ''}@`
    : '';
  const params = new URLSearchParams(parsed.search);
  params.set('target_session_attrs', target);
  return `${parsed.protocol}//${auth}${[...hosts, parsed.host].join(',')}${parsed.pathname}?${params.toString()}`;
}
