import { execFile } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** PostgreSQL 15's binaries (the Debian/Ubuntu package). */
const BIN = process.env.PG_BIN_DIR ?? '/usr/lib/postgresql/15/bin';

/** A primary and a streaming replica, two local clusters in a temporary directory. */
export interface ReplicatedPostgres {
  primaryPort: number;
  replicaPort: number;
  /** `postgres://` URL of `database` on `port`. */
  url(port: number, database?: string): string;
  /** `pg_ctl stop -m immediate` of the primary: no shutdown checkpoint, sockets just close. */
  crashPrimary(): Promise<void>;
  /** `pg_ctl promote -w` of the replica. */
  promoteReplica(): Promise<void>;
  /** Stops both and removes the directory. */
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error()),
      );
    });
  });
}

/**
 * Starts the pair. `synchronous: true` makes the replica a synchronous standby
 * (`synchronous_standby_names`, `synchronous_commit = on`): a commit returns once the replica
 * has flushed it. As root the clusters run as the `postgres` user (initdb refuses root).
 */
export async function startReplicatedPostgres(options: {
  synchronous: boolean;
  /**
   * Puts something between the replica and the primary (a freezing proxy, to make the replica
   * fall behind): gets the primary's port, returns the port the replica streams from.
   */
  replicationVia?: (primaryPort: number) => Promise<number>;
  /** `wal_level=logical` on both (CDC); `replica` otherwise. */
  logical?: boolean;
}): Promise<ReplicatedPostgres> {
  const dir = mkdtempSync(join(tmpdir(), 'agent-outbox-failover-'));
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    chownSync(dir, Number(stdout.trim()), Number(gid.trim()));
  }
  const pg = (tool: string, args: string[]) =>
    asRoot
      ? run('runuser', ['-u', 'postgres', '--', join(BIN, tool), ...args])
      : run(join(BIN, tool), args);
  const primary = join(dir, 'primary');
  const replica = join(dir, 'replica');
  const primaryPort = await freePort();
  const replicaPort = await freePort();
  // The replica gets no synchronous_standby_names: once promoted it has no standby, and every
  // commit would wait for one for good.
  const settings = (port: number, isPrimary: boolean) =>
    [
      `-p ${port}`,
      '-c listen_addresses=127.0.0.1',
      `-c unix_socket_directories=${dir}`,
      `-c wal_level=${options.logical ? 'logical' : 'replica'}`,
      '-c max_wal_senders=5',
      '-c fsync=off',
      ...(options.synchronous && isPrimary
        ? ["-c synchronous_standby_names='replica1'", '-c synchronous_commit=on']
        : []),
    ].join(' ');
  const start = (data: string, port: number) =>
    pg('pg_ctl', [
      '-D',
      data,
      '-o',
      settings(port, data === primary),
      '-l',
      `${data}.log`,
      '-w',
      'start',
    ]);
  let started: string[] = [];
  const stop = async () => {
    for (const data of started)
      await pg('pg_ctl', ['-D', data, '-m', 'immediate', 'stop']).catch(() => undefined);
    started = [];
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await pg('initdb', ['-D', primary, '-U', 'postgres', '--auth=trust', '-E', 'UTF8']);
    await start(primary, primaryPort);
    started.push(primary);
    const upstreamPort = (await options.replicationVia?.(primaryPort)) ?? primaryPort;
    await pg('pg_basebackup', [
      '-d',
      `host=127.0.0.1 port=${upstreamPort} user=postgres application_name=replica1`,
      '-D',
      replica,
      '-R',
      '-X',
      'stream',
    ]);
    await start(replica, replicaPort);
    started.push(replica);
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    primaryPort,
    replicaPort,
    url: (port, database = 'postgres') => `postgres://postgres@127.0.0.1:${port}/${database}`,
    crashPrimary: async () => {
      await pg('pg_ctl', ['-D', primary, '-m', 'immediate', 'stop']);
      started = started.filter((d) => d !== primary);
    },
    promoteReplica: async () => {
      await pg('pg_ctl', ['-D', replica, '-w', 'promote']);
    },
    stop,
  };
}
