import { readFile } from 'node:fs/promises';
import type { BenchDatabase } from './database.js';

/**
 * Where a drain's CPU goes: this Node process's (process.cpuUsage) and the server's, summed over
 * the client backends connected to the bench database (user + system time from /proc/<pid>/stat,
 * which the server shares with the bench on this machine), and apart from them its background
 * workers there (autovacuum: under a held snapshot it keeps coming back to tables whose dead rows
 * it cannot remove, and takes a core from both sides of a key). Issue 43: the drains against PgQ are bound by
 * one of the two, and the figures say which, per message, for both sides of a key.
 *
 * The server's figure has the kernel's tick as its grain (10 ms at CLK_TCK 100): a drain of a
 * few hundred ms reads it to a few per cent. A backend that ends during the drain is not counted
 * (the drains keep their connections); one that starts during it counts from zero. Undefined where
 * /proc is not readable (the server elsewhere, another OS).
 */
export interface CpuSample {
  node: NodeJS.CpuUsage;
  server: Map<number, Ticks> | undefined;
}

interface Ticks {
  ticks: number;
  client: boolean;
}

/** CPU spent between a sample and now, in ms. */
export interface CpuSpent {
  nodeMs: number;
  /** The client backends'. */
  serverMs: number | undefined;
  /** The database's other processes' (autovacuum workers). */
  backgroundMs: number | undefined;
}

const TICKS_PER_SECOND = 100;

async function backendTicks(db: BenchDatabase): Promise<Map<number, Ticks> | undefined> {
  const { rows } = await db.pool.query<{ pid: number; client: boolean }>(
    `SELECT pid, backend_type = 'client backend' AS client
     FROM pg_stat_activity WHERE datname = current_database()`,
  );
  const ticks = new Map<number, Ticks>();
  for (const { pid, client } of rows) {
    try {
      // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
      const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks.set(pid, { ticks: Number(fields[11]) + Number(fields[12]), client });
    } catch {
      return undefined;
    }
  }
  return ticks;
}

export async function cpuSample(db: BenchDatabase): Promise<CpuSample> {
  const server = await backendTicks(db);
  return { node: process.cpuUsage(), server };
}

export async function cpuSince(db: BenchDatabase, before: CpuSample): Promise<CpuSpent> {
  const node = process.cpuUsage(before.node);
  const after = await backendTicks(db);
  const toMs = (ticks: number) => (ticks * 1000) / TICKS_PER_SECOND;
  if (!after || !before.server)
    return {
      nodeMs: (node.user + node.system) / 1000,
      serverMs: undefined,
      backgroundMs: undefined,
    };
  let client = 0;
  let background = 0;
  for (const [pid, now] of after) {
    const spent = now.ticks - (before.server.get(pid)?.ticks ?? 0);
    if (now.client) client += spent;
    else background += spent;
  }
  return {
    nodeMs: (node.user + node.system) / 1000,
    serverMs: toMs(client),
    backgroundMs: toMs(background),
  };
}
