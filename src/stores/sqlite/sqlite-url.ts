/**
 * `--database-url` forms that name a SQLite file: `file:./agent.db` (what Prisma and libSQL
 * write), `file:///var/lib/agent.db`, `sqlite:./agent.db`, `sqlite:///var/lib/agent.db`.
 */
export function isSqliteUrl(url: string): boolean {
  return /^(file|sqlite):/i.test(url);
}

/**
 * The file path of a SQLite URL: the scheme and any `?query` removed, `//` (an empty host, or
 * `localhost`) before an absolute path dropped, percent-escapes decoded. Relative paths stay
 * relative to the working directory, as with Prisma.
 */
export function sqliteFilePath(url: string): string {
  if (!isSqliteUrl(url)) throw new TypeError(`not a SQLite URL: ${url}`);
  let rest = url.slice(url.indexOf(':') + 1);
  const query = rest.indexOf('?');
  if (query >= 0) rest = rest.slice(0, query);
  if (rest.startsWith('//')) {
    rest = rest.slice(2);
    if (rest.startsWith('localhost/')) rest = rest.slice('localhost'.length);
  }
  const path = decodeURIComponent(rest);
  if (path.length === 0) throw new TypeError(`no file in SQLite URL: ${url}`);
  return path;
}
