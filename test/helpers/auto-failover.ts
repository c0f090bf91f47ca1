import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { closedPort } from './services.js';

const run = promisify(execFile);

/** PostgreSQL 15's binaries (the Debian/Ubuntu package), where pg_autoctl finds pg_ctl. */
const BIN = process.env.PG_BIN_DIR ?? '/usr/lib/postgresql/15/bin';
const PG_AUTOCTL = '/usr/bin/pg_autoctl';
const EXTENSION = '/usr/share/postgresql/15/extension/pgautofailover.control';

/**
 * Is pg_auto_failover installed (Debian `postgresql-15-auto-failover`)? False with a printed
 * reason when not, so the suite is skipped locally; under `CI=true` a missing package throws
 * (`.ci/run` installs it).
 */
export function requireAutoFailover(): boolean {
  const missing = [PG_AUTOCTL, EXTENSION, join(BIN, 'pg_ctl')].filter((p) => !existsSync(p));
  if (missing.length === 0) return true;
  const reason = `pg_auto_failover is not installed (${missing.join(', ')} missing): apt-get install -y postgresql-15-auto-failover`;
  if (process.env.CI === 'true') throw new Error(`${reason}, and CI=true requires it`);
  console.warn(`[agent-outbox tests] SKIPPING pg_auto_failover tests: ${reason}`);
  return false;
}

/** A pg_auto_failover formation on this machine: a monitor and two Postgres nodes. */
export interface AutoFailoverCluster {
  /** The formation's URL, as `pg_autoctl show uri` gives it: both nodes, read-write. */
  url: string;
  /** The two nodes' ports, in the order the URL lists them. */
  ports: [number, number];
  /** URL of database `app` on one node. */
  nodeUrl(port: number): string;
  /** How long the formation took to form (monitor, primary, secondary caught up), in ms. */
  formedInMs: number;
  /** The port of the node the monitor says is primary now. */
  primaryPort(): Promise<number>;
  /**
   * `pg_autoctl perform failover`: the primary is drained and demoted, the secondary promoted.
   * Resolves when the monitor has both nodes settled again (the old primary a secondary).
   */
  failover(): Promise<void>;
  /** Stops the nodes and the monitor, removes the directory. */
  stop(): Promise<void>;
}

interface NodeState {
  nodeport: number;
  current_group_state: string;
  assigned_group_state: string;
}

/**
 * Forms a monitor and two nodes (`pg_autoctl create … --run`, `--auth trust --no-ssl`) on free
 * ports in a temporary directory, database `app`. As root every process runs as the `postgres`
 * user (Postgres refuses root). pg_autoctl's own files go under the same directory
 * (`XDG_CONFIG_HOME`, `XDG_DATA_HOME`), so two formations never meet.
 *
 * The second node's pg_basebackup waits for a checkpoint, which the primary spreads over
 * minutes by default: a `CHECKPOINT` on the primary every second meanwhile ends the wait.
 */
export async function startAutoFailover(): Promise<AutoFailoverCluster> {
  const started = Date.now();
  const dir = mkdtempSync(join(tmpdir(), 'agent-outbox-autofailover-'));
  // As root: the postgres user's ids, given to every process started (no runuser in between,
  // so a kill reaches pg_autoctl itself).
  let user: { uid: number; gid: number } | undefined;
  if (process.getuid?.() === 0) {
    const { stdout: uid } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    user = { uid: Number(uid.trim()), gid: Number(gid.trim()) };
    chownSync(dir, user.uid, user.gid);
  }
  const env = {
    PATH: `${BIN}:/usr/bin:/bin`,
    XDG_CONFIG_HOME: join(dir, 'config'),
    XDG_DATA_HOME: join(dir, 'data'),
    XDG_RUNTIME_DIR: join(dir, 'run'),
    HOME: dir,
    LANG: 'C.UTF-8',
  };
  const options = { env, ...user };
  const autoctl = async (args: string[]): Promise<string> => {
    const { stdout } = await run(PG_AUTOCTL, args, { ...options, maxBuffer: 10_000_000 });
    return stdout;
  };
  const services: { child: ChildProcess; pgdata: string; log: string[] }[] = [];
  const service = (args: string[], pgdata: string) => {
    const child = spawn(PG_AUTOCTL, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
    const log: string[] = [];
    child.stdout!.on('data', (chunk: Buffer) => log.push(chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => log.push(chunk.toString()));
    services.push({ child, pgdata, log });
  };
  const [monitorPort, portA, portB] = [await closedPort(), await closedPort(), await closedPort()];
  const monitorData = join(dir, 'monitor');
  const common = [
    '--hostname',
    '127.0.0.1',
    '--auth',
    'trust',
    '--no-ssl',
    '--pgctl',
    join(BIN, 'pg_ctl'),
  ];
  const monitorUrl = `postgres://autoctl_node@127.0.0.1:${monitorPort}/pg_auto_failover?sslmode=disable`;
  const nodeUrl = (port: number) => `postgres://postgres@127.0.0.1:${port}/app`;

  const states = async (): Promise<NodeState[]> => {
    try {
      return JSON.parse(
        await autoctl(['show', 'state', '--pgdata', monitorData, '--json']),
      ) as NodeState[];
    } catch {
      return [];
    }
  };
  const settled = (list: NodeState[]) =>
    list.length === 2 &&
    list.every((n) => n.current_group_state === n.assigned_group_state) &&
    list.some((n) => n.current_group_state === 'primary') &&
    list.some((n) => n.current_group_state === 'secondary');
  const until = async (what: string, check: () => Promise<boolean>, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    while (!(await check())) {
      if (Date.now() > deadline) {
        const logs = services.map((s) => `--- ${s.pgdata}\n${s.log.join('').slice(-3000)}`);
        throw new Error(
          `pg_auto_failover: ${what} not reached in ${timeoutMs} ms\n${logs.join('\n')}`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  };

  const stop = async () => {
    for (const s of [...services].reverse()) {
      await autoctl(['stop', '--pgdata', s.pgdata]).catch(() => undefined);
      const exited = new Promise((resolve) => s.child.once('exit', resolve));
      if (s.child.exitCode === null && s.child.signalCode === null)
        await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 15_000))]);
      if (s.child.exitCode === null && s.child.signalCode === null) {
        s.child.kill('SIGKILL');
        await run(join(BIN, 'pg_ctl'), ['stop', '-m', 'immediate', '-D', s.pgdata], options).catch(
          () => undefined,
        );
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };

  try {
    service(
      [
        'create',
        'monitor',
        '--pgdata',
        monitorData,
        '--pgport',
        String(monitorPort),
        ...common,
        '--run',
      ],
      monitorData,
    );
    await until('monitor accepting connections', () => connects(monitorUrl), 60_000);
    // One node at a time: the first becomes primary (state "single") before the second asks.
    const node = (name: string, port: number) =>
      service(
        [
          'create',
          'postgres',
          '--pgdata',
          join(dir, name),
          '--pgport',
          String(port),
          '--dbname',
          'app',
          '--monitor',
          monitorUrl,
          ...common,
          '--run',
        ],
        join(dir, name),
      );
    node('a', portA);
    await until(
      'first node primary',
      async () => (await states()).some((n) => n.current_group_state === 'single'),
      90_000,
    );
    node('b', portB);
    const checkpoints = setInterval(() => {
      void checkpoint(nodeUrl(portA));
    }, 1_000);
    try {
      await until('second node secondary', async () => settled(await states()), 120_000);
    } finally {
      clearInterval(checkpoints);
    }
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    url: `postgres://postgres@127.0.0.1:${portA},127.0.0.1:${portB}/app?target_session_attrs=read-write`,
    ports: [portA, portB],
    nodeUrl,
    formedInMs: Date.now() - started,
    primaryPort: async () => {
      const primary = (await states()).find((n) => n.current_group_state === 'primary');
      if (!primary) throw new Error('pg_auto_failover: the monitor reports no primary');
      return primary.nodeport;
    },
    failover: async () => {
      const before = (await states()).find((n) => n.current_group_state === 'primary')?.nodeport;
      await autoctl(['perform', 'failover', '--pgdata', monitorData]);
      await until(
        'failover settled',
        async () => {
          const list = await states();
          return (
            settled(list) &&
            list.find((n) => n.current_group_state === 'primary')?.nodeport !== before
          );
        },
        120_000,
      );
    },
    stop,
  };
}

async function connects(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function checkpoint(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('CHECKPOINT');
  } catch {
    // Not up yet, or restarting: the next tick tries again.
  } finally {
    await client.end().catch(() => undefined);
  }
}
