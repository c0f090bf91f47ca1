import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import {
  accessSync,
  chmodSync,
  chownSync,
  constants,
  mkdtempSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { closedPort } from './services.js';

/**
 * PgBouncer from Debian's `pgbouncer` package (1.18 on this project's CI), in front of the test
 * Postgres, the way most managed Postgres is reached: transaction mode, a pool of 4 server
 * connections per database and user, and no prepared-statement support (1.18 has none; 1.21+
 * only with `max_prepared_statements`), the strictest case. Nothing but what a user gets from the
 * package: no `ignore_startup_parameters`, no `server_reset_query` in transaction mode.
 */
export interface PgBouncer {
  port: number;
  /** `upstreamUrl`'s database and user, through PgBouncer. */
  url(upstreamUrl: string): string;
  /** PgBouncer's log so far (for a failing test's message). */
  log(): string;
  /** Stops it (SIGTERM: closes every connection at once) and removes its directory. */
  stop(): Promise<void>;
}

const CANDIDATES = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer', '/usr/local/bin/pgbouncer'];

/** The pgbouncer binary, or undefined when it is not installed. */
export function pgbouncerBinary(): string | undefined {
  for (const path of CANDIDATES) {
    try {
      accessSync(path, constants.X_OK);
      return path;
    } catch {
      // next
    }
  }
  return undefined;
}

/**
 * Whether the PgBouncer suites run: installed → true. Missing → false with a printed reason (the
 * suite is skipped on a laptop without it); under `CI=true` a throw, so CI without it fails
 * (`.ci/run` installs it).
 */
export function requirePgBouncer(): boolean {
  if (pgbouncerBinary()) return true;
  const reason = `pgbouncer is not installed (looked for ${CANDIDATES.join(', ')}); apt-get install -y pgbouncer`;
  if (process.env.CI === 'true') throw new Error(`${reason}, and CI=true requires it`);
  console.warn(`[agent-outbox tests] SKIPPING PgBouncer tests: ${reason}`);
  return false;
}

/**
 * Starts PgBouncer on a free port in front of the Postgres of `upstreamUrl` (any database on it:
 * `url()` maps one through). PgBouncer refuses to run as root: as root it runs as `postgres`
 * (`-u postgres`), its directory made that user's. Not daemonised: a child process of the test,
 * stopped by its pid.
 */
export async function startPgBouncer(
  upstreamUrl: string,
  options: { poolSize?: number } = {},
): Promise<PgBouncer> {
  const binary = pgbouncerBinary();
  if (!binary) throw new Error('pgbouncer is not installed (apt-get install -y pgbouncer)');
  const upstream = new URL(upstreamUrl);
  const user = decodeURIComponent(upstream.username || 'postgres');
  // Another run on this machine may take the port between closedPort() and the bind: retry.
  for (let attempt = 0; ; attempt++) {
    const port = await closedPort();
    const dir = mkdtempSync(join(tmpdir(), 'agent-outbox-pgbouncer-'));
    writeFileSync(
      join(dir, 'pgbouncer.ini'),
      [
        '[databases]',
        `* = host=${upstream.hostname} port=${upstream.port || '5432'}`,
        '[pgbouncer]',
        'listen_addr = 127.0.0.1',
        `listen_port = ${port}`,
        'unix_socket_dir =',
        'auth_type = trust',
        // trust still needs the user listed.
        `auth_file = ${join(dir, 'users.txt')}`,
        'pool_mode = transaction',
        `default_pool_size = ${options.poolSize ?? 4}`,
        'max_client_conn = 500',
        `logfile = ${join(dir, 'pgbouncer.log')}`,
        '',
      ].join('\n'),
    );
    writeFileSync(join(dir, 'users.txt'), `"${user}" ""\n`);
    const asRoot = process.getuid?.() === 0;
    if (asRoot) {
      const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
      const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
      chmodSync(dir, 0o755);
      for (const path of [dir, join(dir, 'pgbouncer.ini'), join(dir, 'users.txt')])
        chownSync(path, uid, gid);
    }
    const child = spawn(
      binary,
      [...(asRoot ? ['-u', 'postgres'] : []), join(dir, 'pgbouncer.ini')],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    const bouncer = handle(child, exited, dir, port, () => stderr);
    if (await answers(bouncer.url(upstreamUrl), exited)) return bouncer;
    await bouncer.stop();
    if (attempt >= 3) throw new Error(`pgbouncer did not start:\n${stderr}`);
  }
}

function handle(
  child: ChildProcess,
  exited: Promise<void>,
  dir: string,
  port: number,
  log: () => string,
): PgBouncer {
  return {
    port,
    url(upstreamUrl) {
      const url = new URL(upstreamUrl);
      url.hostname = '127.0.0.1';
      url.port = String(port);
      return url.toString();
    },
    log,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const killed = setTimeout(() => child.kill('SIGKILL'), 5_000);
        await exited;
        clearTimeout(killed);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Waits until a query through PgBouncer is answered (false when the process exits first). */
async function answers(url: string, exited: Promise<void>): Promise<boolean> {
  let gone = false;
  void exited.then(() => (gone = true));
  for (let i = 0; i < 100 && !gone; i++) {
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.query('SELECT 1');
      return true;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 100));
    } finally {
      await client.end().catch(() => undefined);
    }
  }
  return false;
}
