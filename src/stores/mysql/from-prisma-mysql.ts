import { isPrismaClient } from '../../store/from-prisma.js';
import type { MysqlQueryable } from './mysql-connection.js';

/**
 * The subset of a Prisma client on MySQL/MariaDB, or of the `tx` of
 * `prisma.$transaction(async (tx) => ...)`, that {@link fromPrismaMysql} calls. Typed
 * structurally so the package imports neither `@prisma/client` nor `@prisma/adapter-mariadb`.
 */
export interface PrismaMysqlQueryable {
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): PromiseLike<T>;
  $executeRawUnsafe(query: string, ...values: unknown[]): PromiseLike<number>;
}

const PRISMA_MYSQL_REASON =
  'fromPrismaMysql() was given the PrismaClient itself, not the tx of an interactive transaction: each of its queries commits by itself. Enqueue inside prisma.$transaction(async (tx) => { ... }) on fromPrismaMysql(tx).';

/**
 * Statements whose result is rows. The rest go through `$executeRawUnsafe`, whose affected-row
 * count is what the writer's callers read of an INSERT/UPDATE/DELETE (`$queryRawUnsafe` returns
 * an empty list for those).
 */
const RETURNS_ROWS = /^\s*(?:SELECT|WITH|SHOW|VALUES|TABLE)\b/i;

/**
 * Adapts Prisma 7's interactive transactions on MySQL/MariaDB (the `@prisma/adapter-mariadb`
 * driver adapter) for the MySQL writer:
 * `prisma.$transaction(async (tx) => outbox.enqueue(fromPrismaMysql(tx), message))`.
 *
 * Why raw queries and not the driver's connection: the `tx` Prisma hands you exposes no
 * connection (the adapter's transaction object lives inside Prisma's query engine), but its
 * `$queryRawUnsafe` / `$executeRawUnsafe` run on the connection that holds the transaction, in
 * it; the values are bind parameters, never interpolated. Two things mysql2 does that Prisma does
 * not are done here: an array value expands to a `?, ?, ...` list (the writer reads its rows back
 * with `IN (?)`), and rows come back as the store's pool returns them (BIGINT as a number while
 * exact, else a string; DECIMAL as a string, without the trailing zeros Prisma's `Decimal` drops)
 * rather than as `BigInt`/`Decimal`.
 *
 * The server's status flags, which the writer reads on a mysql2 connection to refuse autocommit,
 * do not reach Prisma's raw API; the client itself is told apart from a `tx` instead (it has
 * `$disconnect`) and refused with `OutboxAutocommitError` (nothing written;
 * `{ allowAutocommit: true }` for a lone message on purpose). Prisma's transactions time out after
 * 5 s by default (`$transaction`'s `timeout` option). Tested with Prisma 7.10 on MariaDB 10.11.
 *
 * @example
 * ```ts
 * await prisma.$transaction(async (tx) => {
 *   await tx.order.create({ data: { id: 'o-1', amount: 1200 } });
 *   await outbox.enqueue(fromPrismaMysql(tx), {
 *     topic: 'payment.charge',
 *     aggregateId: 'order:o-1',
 *     payload: { amount: 1200 },
 *   });
 * });
 * ```
 */
export function fromPrismaMysql(tx: PrismaMysqlQueryable): MysqlQueryable {
  return {
    outsideTransaction: () => (isPrismaClient(tx) ? PRISMA_MYSQL_REASON : undefined),
    async query(sql: string, values?: unknown): Promise<[unknown, unknown]> {
      const [text, flat] = expandLists(sql, (values as readonly unknown[] | undefined) ?? []);
      if (RETURNS_ROWS.test(text)) {
        const rows = await tx.$queryRawUnsafe<Record<string, unknown>[]>(text, ...flat);
        return [rows.map(asMysql2Values), undefined];
      }
      const affectedRows = await tx.$executeRawUnsafe(text, ...flat);
      return [{ affectedRows, insertId: 0 }, undefined];
    },
  };
}

/**
 * `sql` with each `?` whose value is an array replaced by one `?` per element, and the values
 * flattened to match, as mysql2 formats them (an empty list becomes `NULL`, which matches
 * nothing, where mysql2 would send `IN ()`, a syntax error). A `?` inside a quoted string, a
 * quoted identifier or a comment is not a placeholder and is left alone.
 */
export function expandLists(sql: string, values: readonly unknown[]): [string, unknown[]] {
  if (!values.some(Array.isArray)) return [sql, [...values]];
  let text = '';
  const flat: unknown[] = [];
  let next = 0;
  let i = 0;
  while (i < sql.length) {
    const c = sql[i]!;
    const skipTo = skipQuotedOrComment(sql, i);
    if (skipTo > i) {
      text += sql.slice(i, skipTo);
      i = skipTo;
      continue;
    }
    if (c === '?') {
      const value = values[next++];
      if (Array.isArray(value)) {
        if (value.some(Array.isArray))
          throw new TypeError('fromPrismaMysql(): nested arrays (bulk VALUES ?) are not supported');
        text += value.length === 0 ? 'NULL' : value.map(() => '?').join(', ');
        flat.push(...(value as unknown[]));
      } else {
        text += '?';
        flat.push(value);
      }
    } else text += c;
    i++;
  }
  flat.push(...values.slice(next));
  return [text, flat];
}

/** The index past the quoted string, quoted identifier or comment starting at `i`, else `i`. */
function skipQuotedOrComment(sql: string, i: number): number {
  const c = sql[i]!;
  if (c === "'" || c === '"' || c === '`') {
    let j = i + 1;
    while (j < sql.length) {
      if (sql[j] === '\\' && c !== '`') j += 2;
      else if (sql[j] === c) {
        // A doubled quote is an escaped one, inside the same string.
        if (sql[j + 1] === c) j += 2;
        else return j + 1;
      } else j++;
    }
    return sql.length;
  }
  if (c === '#' || (c === '-' && sql.startsWith('-- ', i))) {
    const end = sql.indexOf('\n', i);
    return end === -1 ? sql.length : end;
  }
  if (c === '/' && sql[i + 1] === '*') {
    const end = sql.indexOf('*/', i + 2);
    return end === -1 ? sql.length : end + 2;
  }
  return i;
}

/**
 * The row with BIGINT (`BigInt`) columns as numbers while exact, else strings, and DECIMAL
 * (`Decimal`) as strings: what the store's mysql2 pool returns (`supportBigNumbers`,
 * open-mysql.ts), so a row reads the same whichever client ran it (a DECIMAL's trailing zeros
 * excepted: Prisma's `Decimal` has already dropped them). A `BigInt` would also make a tool's
 * result fail `JSON.stringify`.
 */
function asMysql2Values(row: Record<string, unknown>): Record<string, unknown> {
  let copy: Record<string, unknown> | undefined;
  for (const key in row) {
    const value = row[key];
    let converted: unknown = value;
    if (typeof value === 'bigint')
      converted =
        value <= BigInt(Number.MAX_SAFE_INTEGER) && value >= BigInt(Number.MIN_SAFE_INTEGER)
          ? Number(value)
          : value.toString();
    // decimal.js, which Prisma's Decimal is, tags its instances: no import needed.
    else if (Object.prototype.toString.call(value) === '[object Decimal]')
      converted = String(value);
    else continue;
    copy ??= { ...row };
    copy[key] = converted;
  }
  return copy ?? row;
}
