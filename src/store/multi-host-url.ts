/**
 * libpq's multi-host connection strings, which `pg` does not read: the URL an HA manager
 * (pg_auto_failover, Patroni) hands out instead of a proxy,
 * `postgres://h1:5432,h2:5433/app?target_session_attrs=read-write`. This file only parses them
 * (no I/O); multi-host-pool.ts connects.
 */

/**
 * Which server a session may land on, libpq's `target_session_attrs` (PostgreSQL 14 values):
 *
 * - `any` — the first host that answers (the default).
 * - `read-write` — a session that accepts writes: not a standby, no `default_transaction_read_only`.
 * - `read-only` — the opposite.
 * - `primary` / `standby` — by `pg_is_in_recovery()` alone.
 * - `prefer-standby` — a standby if one answers, else any host.
 */
export type TargetSessionAttrs =
  'any' | 'read-write' | 'read-only' | 'primary' | 'standby' | 'prefer-standby';

const TARGETS: readonly TargetSessionAttrs[] = [
  'any',
  'read-write',
  'read-only',
  'primary',
  'standby',
  'prefer-standby',
];

/** One host of a connection string; `port` undefined means `pg`'s default (`PGPORT` or 5432). */
export interface DatabaseHost {
  host: string;
  port: number | undefined;
}

/** A parsed `postgres://` URL with one or more hosts. */
export interface MultiHostUrl {
  /** In the order given: they are tried in this order, as libpq does. */
  hosts: DatabaseHost[];
  targetSessionAttrs: TargetSessionAttrs;
  /**
   * True when there is nothing for `pg` not to understand: one host, `any`. Such a URL is
   * handed to `pg` as it is.
   */
  plain: boolean;
  /**
   * The URL of one host, as `pg` reads it: the same user, password, database and parameters
   * (`sslmode`, `application_name`…), `target_session_attrs` left out.
   */
  urlFor(host: DatabaseHost): string;
}

/** `host:port`, IPv6 in brackets: how errors and logs name a host. */
export function hostLabel({ host, port }: DatabaseHost): string {
  const shown = host.includes(':') ? `[${host}]` : host;
  return port === undefined ? shown : `${shown}:${port}`;
}

// scheme, user info (up to the last @ before the path), host list, the rest (path, query, hash).
const URL_SHAPE = /^(postgres(?:ql)?:)\/\/(?:([^/?#]*)@)?([^/?#]*)(.*)$/i;

/**
 * Parses a `postgres://` or `postgresql://` URL whose authority may list several hosts
 * (`h1:5432,h2,[::1]:5433`). Returns undefined for anything else (a socket path, another
 * scheme), which the caller checks its own way. Throws an Error that says what is wrong for a
 * bad port or an unknown `target_session_attrs`.
 *
 * @example
 * ```ts
 * const url = parseMultiHostUrl('postgres://app@h1:5432,h2:5433/app?target_session_attrs=read-write');
 * // url.hosts → [{ host: 'h1', port: 5432 }, { host: 'h2', port: 5433 }]
 * // url.urlFor(url.hosts[1]) → 'postgres://app@h2:5433/app'
 * ```
 */
export function parseMultiHostUrl(url: string): MultiHostUrl | undefined {
  const match = URL_SHAPE.exec(url);
  if (!match) return undefined;
  const [, scheme, userInfo, hostList, rest] = match as unknown as [
    string,
    string,
    string | undefined,
    string,
    string,
  ];
  const hosts = hostList.split(',').map(parseHost);
  const queryAt = rest.indexOf('?');
  const path = queryAt === -1 ? rest : rest.slice(0, queryAt);
  // Kept as written (not re-encoded by URLSearchParams), but for the one parameter we take.
  const pairs = queryAt === -1 ? [] : rest.slice(queryAt + 1).split('&');
  const isTarget = (pair: string) => pair.split('=')[0] === 'target_session_attrs';
  const given = pairs.filter(isTarget).pop();
  const target =
    given === undefined ? 'any' : decodeURIComponent(given.slice(given.indexOf('=') + 1));
  if (!TARGETS.includes(target as TargetSessionAttrs))
    throw new Error(
      `target_session_attrs=${target} is not one of ${TARGETS.join(', ')} (libpq's values)`,
    );
  const kept = pairs.filter((pair) => pair !== '' && !isTarget(pair));
  const query = kept.length > 0 ? `?${kept.join('&')}` : '';
  const auth = userInfo === undefined ? '' : `${userInfo}@`;
  return {
    hosts,
    targetSessionAttrs: target as TargetSessionAttrs,
    plain: hosts.length === 1 && target === 'any',
    urlFor: (host) => `${scheme}//${auth}${hostLabel(host)}${path}${query}`,
  };
}

function parseHost(text: string): DatabaseHost {
  const bracketed = /^\[([^\]]*)\](?::(.*))?$/.exec(text);
  const [host, port] = bracketed
    ? [bracketed[1]!, bracketed[2]]
    : text.includes(':')
      ? [text.slice(0, text.lastIndexOf(':')), text.slice(text.lastIndexOf(':') + 1)]
      : [text, undefined];
  if (port === undefined || port === '') return { host: host || 'localhost', port: undefined };
  const number = Number(port);
  if (!/^\d+$/.test(port) || number < 1 || number > 65_535)
    throw new Error(`"${text}" has the port "${port}": a port is a number from 1 to 65535`);
  return { host: host || 'localhost', port: number };
}

/**
 * The URL with its password replaced by `***` (any number of hosts), for logs and errors;
 * undefined when it is not a `postgres://` URL.
 */
export function redactDatabaseUrl(url: string): string | undefined {
  const match = URL_SHAPE.exec(url);
  if (!match) return undefined;
  const [, scheme, userInfo, hostList, rest] = match as unknown as [
    string,
    string,
    string | undefined,
    string,
    string,
  ];
  const colon = userInfo?.indexOf(':') ?? -1;
  const auth =
    userInfo === undefined
      ? ''
      : colon === -1
        ? `${userInfo}@`
        : `${userInfo.slice(0, colon)}:***@`;
  return `${scheme}//${auth}${hostList}${rest}`;
}
