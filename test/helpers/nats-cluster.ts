import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { closedPort } from './services.js';

/** The Debian package's binary; NATS_SERVER_BIN overrides it. */
export const NATS_SERVER_BIN = process.env.NATS_SERVER_BIN ?? '/usr/sbin/nats-server';

/** One `nats-server` of a {@link NatsCluster}. */
export interface NatsNode {
  /** `server_name`, also the name JetStream reports (`n1`, `n2`, `n3`). */
  name: string;
  clientPort: number;
  clusterPort: number;
  /** HTTP monitoring port (`/healthz`, `/connz`). */
  monitorPort: number;
  /** `nats://127.0.0.1:<clientPort>`. */
  url: string;
  /** True while the process runs. */
  running: boolean;
}

/**
 * Three `nats-server` processes in one JetStream cluster on loopback, on free ports, each with
 * its own store directory under one temp directory: what people run, on this machine.
 */
export interface NatsCluster {
  nodes: NatsNode[];
  /** Every node, in the NATS client's own list syntax: `nats://h:p1,nats://h:p2,nats://h:p3`. */
  url: string;
  /** `kill -9` of node `i`; resolves once the process is gone. */
  kill(i: number): Promise<void>;
  /**
   * Starts node `i` again, same ports and store, and waits until its JetStream is up
   * (`/healthz?js-server-only=true`).
   */
  start(i: number): Promise<void>;
  /** Index of the node a client named `name` is connected to (from each node's `/connz`). */
  connectedTo(name: string): Promise<number | undefined>;
  /** Stops every node and removes the directory. */
  stop(): Promise<void>;
}

/** Whether the binary exists: the suite's skip condition. */
export function natsServerInstalled(): boolean {
  return existsSync(NATS_SERVER_BIN);
}

/**
 * Starts the cluster and waits until every node answers `/healthz` (JetStream meta leader
 * elected and current). `down`: nodes to leave stopped at the start (started later with `start`).
 */
export async function startNatsCluster(options: { down?: number[] } = {}): Promise<NatsCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'agent-outbox-nats-'));
  const nodes: NatsNode[] = [];
  for (let i = 1; i <= 3; i++) {
    const clientPort = await closedPort();
    nodes.push({
      name: `n${i}`,
      clientPort,
      clusterPort: await closedPort(),
      monitorPort: await closedPort(),
      url: `nats://127.0.0.1:${clientPort}`,
      running: false,
    });
  }
  const routes = nodes.map((n) => `nats://127.0.0.1:${n.clusterPort}`).join(',');
  const children = new Map<number, { child: ChildProcess; exited: Promise<void> }>();
  const logs = new Map<number, string>();

  const spawnNode = (i: number) => {
    const node = nodes[i]!;
    const store = join(dir, node.name);
    mkdirSync(store, { recursive: true });
    const child = spawn(
      NATS_SERVER_BIN,
      [
        '-a',
        '127.0.0.1',
        '-p',
        String(node.clientPort),
        '-m',
        String(node.monitorPort),
        '-js',
        '-sd',
        store,
        '--server_name',
        node.name,
        '--cluster_name',
        'agent-outbox-test',
        '--cluster',
        `nats://127.0.0.1:${node.clusterPort}`,
        '--routes',
        routes,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    // nats-server logs to stderr; the tail explains a node that never became healthy.
    child.stderr!.on('data', (chunk: Buffer) =>
      logs.set(i, ((logs.get(i) ?? '') + chunk.toString()).slice(-4_000)),
    );
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    children.set(i, { child, exited });
    node.running = true;
  };

  // `serverOnly`: JetStream up and the meta group current, without waiting for every stream and
  // consumer replica to catch up (a restarted node reports an idle durable consumer "not
  // current" for a long while, though it serves publishes at once).
  const healthy = async (i: number, serverOnly = false): Promise<boolean> => {
    try {
      const query = serverOnly ? '?js-server-only=true' : '';
      const response = await fetch(`http://127.0.0.1:${nodes[i]!.monitorPort}/healthz${query}`);
      return response.ok;
    } catch {
      return false;
    }
  };
  const waitHealthy = async (which: number[], serverOnly = false) => {
    const until = Date.now() + 60_000;
    for (;;) {
      const states = await Promise.all(which.map((i) => healthy(i, serverOnly)));
      if (states.every(Boolean)) return;
      if (Date.now() > until) {
        const tails = which.map((i) => `${nodes[i]!.name}:\n${logs.get(i) ?? ''}`).join('\n');
        throw new Error(`NATS cluster not healthy within 60 s; server logs:\n${tails}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  };

  const down = new Set(options.down ?? []);
  const up = [0, 1, 2].filter((i) => !down.has(i));
  for (const i of up) spawnNode(i);
  const cluster: NatsCluster = {
    nodes,
    url: nodes.map((n) => n.url).join(','),
    async kill(i) {
      const running = children.get(i);
      if (!running) return;
      running.child.kill('SIGKILL');
      await running.exited;
      children.delete(i);
      nodes[i]!.running = false;
    },
    async start(i) {
      if (children.has(i)) return;
      spawnNode(i);
      await waitHealthy([i], true);
    },
    async connectedTo(name) {
      for (const [i, node] of nodes.entries()) {
        if (!node.running) continue;
        try {
          const response = await fetch(`http://127.0.0.1:${node.monitorPort}/connz?limit=1024`);
          const body = (await response.json()) as { connections?: { name?: string }[] };
          if (body.connections?.some((c) => c.name === name)) return i;
        } catch {
          /* a node going down: the others answer */
        }
      }
      return undefined;
    },
    async stop() {
      for (const i of [...children.keys()]) await cluster.kill(i);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    await waitHealthy(up);
  } catch (error) {
    await cluster.stop();
    throw error;
  }
  return cluster;
}
