import pg from 'pg';
import { sessionAttributesSql, type SessionAttributes } from '../sql/session-attributes.js';
import {
  hostLabel,
  parseMultiHostUrl,
  type DatabaseHost,
  type MultiHostUrl,
  type TargetSessionAttrs,
} from './multi-host-url.js';

/**
 * Connections from a database URL, multi-host ones included: the one place a URL becomes a
 * `pg.Pool` or a `pg.Client`.
 *
 * `pg` reads one host. For `postgres://h1:5432,h2:5433/app?target_session_attrs=read-write`
 * the pool gets a `Client` class of ours whose `connect()` first picks the host: the one that
 * answered last time, else each host in order until one has the session attributes asked for
 * (sql/session-attributes.ts), as libpq does. A new connection to the remembered host is
 * checked again before use; when it fails or no longer fits (a failover made it a standby) the
 * host is forgotten and that connect fails, so the next one looks through the list again. A
 * failover therefore costs the statements in flight on the old primary (their connections die,
 * and a pool drops a client whose query failed) and one failed connect; the dispatcher retries
 * both (docs/failure-handling.md).
 *
 * A URL `pg` understands as it is (one host, no `target_session_attrs` or `any`) gets a plain
 * `pg.Pool` / `pg.Client`.
 */

/** Settings of a pool, as `pg.Pool` takes them; the URL gives the rest. */
export type PgPoolSettings = Omit<pg.PoolConfig, 'connectionString' | 'Client'>;
/** Settings of one connection, as `pg.Client` takes them; the URL gives the rest. */
export type PgClientSettings = Omit<pg.ClientConfig, 'connectionString'>;

/**
 * A `pg.Pool` on `url`, which may list several hosts (libpq's syntax).
 *
 * @example
 * ```ts
 * const pool = createPgPool('postgres://h1:5432,h2:5433/app?target_session_attrs=read-write', {
 *   max: 10,
 *   connectionTimeoutMillis: 10_000,
 * });
 * const dispatcher = createDispatcher({ executor: fromPg(pool), publisher });
 * ```
 */
export function createPgPool(url: string, settings: PgPoolSettings = {}): pg.Pool {
  const parsed = parseMultiHostUrl(url);
  if (!parsed || parsed.plain) return new pg.Pool({ ...settings, connectionString: url });
  return new pg.Pool({
    ...settings,
    connectionString: parsed.urlFor(parsed.hosts[0]!),
    Client: resolvingClient(new HostResolver(parsed, settings)) as new () => pg.ClientBase,
  });
}

/** A `pg.Client` on `url`, which may list several hosts; connect it as usual. */
export function createPgClient(url: string, settings: PgClientSettings = {}): pg.Client {
  const parsed = parseMultiHostUrl(url);
  if (!parsed || parsed.plain) return new pg.Client({ ...settings, connectionString: url });
  const Client = resolvingClient(new HostResolver(parsed, settings));
  return new Client({ ...settings, connectionString: parsed.urlFor(parsed.hosts[0]!) });
}

/** Does a session with these attributes fit the target? */
function fits(target: TargetSessionAttrs, session: SessionAttributes, pass: 1 | 2): boolean {
  switch (target) {
    case 'read-write':
      return !session.read_only;
    case 'read-only':
      return session.read_only;
    case 'primary':
      return !session.in_recovery;
    case 'standby':
      return session.in_recovery;
    case 'prefer-standby':
      return pass === 2 || session.in_recovery;
    case 'any':
      return true;
  }
}

function describeSession(session: SessionAttributes): string {
  if (session.in_recovery) return 'a standby (in recovery)';
  return session.read_only ? 'a primary that refuses writes (read-only)' : 'a read-write primary';
}

/** Which host new connections go to; shared by every connection of one pool. */
class HostResolver {
  #current: DatabaseHost | undefined;
  #looking: Promise<DatabaseHost> | undefined;
  readonly #redacted: string;

  constructor(
    readonly parsed: MultiHostUrl,
    readonly settings: PgClientSettings,
  ) {
    this.#redacted = `${parsed.hosts.map(hostLabel).join(',')} (target_session_attrs=${parsed.targetSessionAttrs})`;
  }

  /** The remembered host, or the first that fits (one search at a time, however many ask). */
  pick(): Promise<{ host: DatabaseHost; remembered: boolean }> {
    if (this.#current) return Promise.resolve({ host: this.#current, remembered: true });
    this.#looking ??= this.#search().finally(() => (this.#looking = undefined));
    return this.#looking.then((host) => ({ host, remembered: false }));
  }

  /** A connection to `host` failed or no longer fits: look again next time. */
  forget(host: DatabaseHost): void {
    if (this.#current === host) this.#current = undefined;
  }

  /** Does `client`'s session fit? Checks nothing for `any`. */
  async check(client: pg.ClientBase, pass: 1 | 2 = 2): Promise<SessionAttributes | undefined> {
    if (this.parsed.targetSessionAttrs === 'any') return undefined;
    const { rows } = await client.query<SessionAttributes>(sessionAttributesSql);
    const session = rows[0]!;
    return fits(this.parsed.targetSessionAttrs, session, pass) ? undefined : session;
  }

  /**
   * The SQLSTATE of a refused connect: 25006 (read_only_sql_transaction) when writes were asked
   * for and every host answered read-only — the database refuses writes, as a dispatcher's
   * statements would be told (dispatcher/read-only-watch.ts); else libpq's 08001, "unable to
   * establish connection".
   */
  refusal(misfit: SessionAttributes): string {
    return this.#refusal(misfit.read_only);
  }

  #refusal(allReadOnly: boolean): string {
    const wantsWrites = ['read-write', 'primary'].includes(this.parsed.targetSessionAttrs);
    return wantsWrites && allReadOnly ? '25006' : '08001';
  }

  async #search(): Promise<DatabaseHost> {
    const why: string[] = [];
    let unreachable = 0;
    const passes: (1 | 2)[] = this.parsed.targetSessionAttrs === 'prefer-standby' ? [1, 2] : [2];
    for (const pass of passes) {
      for (const host of this.parsed.hosts) {
        const probe = new pg.Client({
          ...this.settings,
          connectionString: this.parsed.urlFor(host),
        });
        probe.on('error', () => undefined);
        try {
          await probe.connect();
          const misfit = await this.check(probe, pass);
          if (!misfit) return (this.#current = host);
          why.push(`${hostLabel(host)} is ${describeSession(misfit)}`);
        } catch (error) {
          why.push(`${hostLabel(host)}: ${(error as Error).message}`);
          unreachable++;
        } finally {
          await probe.end().catch(() => undefined);
        }
      }
    }
    throw Object.assign(
      new Error(
        `no host of ${this.#redacted} fits: ${why.join('; ')}. During a failover this lasts until the new primary is promoted; otherwise check the hosts and target_session_attrs`,
      ),
      { code: this.#refusal(unreachable === 0) },
    );
  }
}

/** pg's Client internals this file sets: the host and port `_connect()` dials. */
interface Dialable {
  host: string;
  port: number;
  connectionParameters: { host: string; port: number };
  connection: { stream: { destroyed?: boolean } };
}

function resolvingClient(resolver: HostResolver): typeof pg.Client {
  return class ResolvingClient extends pg.Client {
    override connect(): Promise<pg.Client>;
    override connect(callback: (error: Error | null) => void): void;
    override connect(callback?: (error: Error | null) => void): Promise<pg.Client> | void {
      const connected = this.#connectToPicked();
      if (!callback) return connected;
      connected.then(
        () => callback(null),
        (error: Error) => callback(error),
      );
    }

    async #connectToPicked(): Promise<pg.Client> {
      const { host, remembered } = await resolver.pick();
      const self = this as unknown as Dialable;
      // The pool's connect timeout destroys the socket of a client still connecting: it ran out
      // while the hosts were searched.
      if (self.connection.stream.destroyed)
        throw new Error('Connection terminated due to connection timeout');
      const port = host.port ?? Number(pg.defaults.port ?? 5432);
      self.host = self.connectionParameters.host = host.host;
      self.port = self.connectionParameters.port = port;
      try {
        await super.connect();
      } catch (error) {
        resolver.forget(host);
        throw error;
      }
      // A host found by the search was checked a moment ago; a remembered one may have changed.
      let misfit: SessionAttributes | undefined;
      if (remembered) {
        try {
          misfit = await resolver.check(this);
        } catch (error) {
          resolver.forget(host);
          await this.end().catch(() => undefined);
          throw error;
        }
      }
      if (misfit) {
        resolver.forget(host);
        await this.end().catch(() => undefined);
        throw Object.assign(
          new Error(
            `${hostLabel(host)} is now ${describeSession(misfit)} (a failover?): the next connection looks for the host that fits target_session_attrs=${resolver.parsed.targetSessionAttrs}`,
          ),
          { code: resolver.refusal(misfit) },
        );
      }
      return this;
    }
  };
}
