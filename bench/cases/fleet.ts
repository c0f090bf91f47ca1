import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { fromPg, migrate } from '../../src/index.js';
import { log, median, percentiles, round, sleep } from '../lib/measure.js';

/**
 * Issue 40's keys: a fleet of tenant databases (made from one migrated template) served by ONE
 * process on a connection budget.
 *
 * - `fleet_idle_latency_p95_ms`: one message in each database, at random moments over the trickle
 *   window, commit (sent) → publish call in the fleet process. Target ≤ 1,000.
 * - `fleet_connections_max`: most connections of the fleet process seen in `pg_stat_activity`
 *   (sampled every 20 ms through both phases), against `fleet_connection_budget` (its
 *   `--max-connections`, the default 10).
 * - `fleet_throughput_ratio`: 10 busy databases among the idle ones — a backlog released at once
 *   in each — drained by the fleet process, over the same 10 drained by 10 processes, one per
 *   database (the deployment the fleet replaces). Target ≥ 0.8.
 *
 * Both sides run in child processes (fleet-child.ts) with a no-op publisher; the backlog is
 * loaded with `available_at` a day ahead and released by one UPDATE per database, so neither
 * side's clock starts before all of it is in place.
 */
const child = fileURLToPath(new URL('./fleet-child.ts', import.meta.url));
const BUDGET = 10;
const BUSY = 10;

export interface FleetSize {
  databases: number;
  trickleSeconds: number;
  busyMessages: number;
  rounds: number;
}

export const FLEET_QUICK: FleetSize = {
  databases: 100,
  trickleSeconds: 10,
  busyMessages: 5_000,
  rounds: 1,
};
export const FLEET_FULL: FleetSize = {
  databases: 500,
  trickleSeconds: 30,
  busyMessages: 20_000,
  rounds: 2,
};

interface Child {
  proc: ChildProcess;
  next(predicate: (o: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
  send(line: string): void;
  stop(): Promise<void>;
}

function startChild(args: string[]): Child {
  const proc = spawn(process.execPath, ['--import', 'tsx', child, ...args], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines: Record<string, unknown>[] = [];
  const waiters: (() => void)[] = [];
  let exited: string | undefined;
  // A child that dies must fail the case, not leave the bench waiting for its next line.
  proc.once('exit', (code, signal) => {
    exited = `fleet bench child ${args[0]} exited (${String(code ?? signal)})`;
    waiters.splice(0).forEach((w) => w());
  });
  createInterface({ input: proc.stdout! }).on('line', (line) => {
    if (!line.startsWith('{')) return;
    lines.push(JSON.parse(line) as Record<string, unknown>);
    waiters.splice(0).forEach((w) => w());
  });
  return {
    proc,
    async next(predicate) {
      for (;;) {
        const i = lines.findIndex(predicate);
        if (i >= 0) return lines.splice(i, 1)[0]!;
        if (exited) throw new Error(exited);
        await new Promise<void>((resolve) => waiters.push(resolve));
      }
    },
    send: (line) => proc.stdin!.write(`${line}\n`),
    async stop() {
      if (exited) return;
      proc.stdin!.write('stop\n');
      await new Promise((resolve) => proc.once('exit', resolve));
    },
  };
}

function urlOf(admin: string, database: string): string {
  const u = new URL(admin);
  u.pathname = `/${database}`;
  return u.toString();
}

/** Samples the connections of `application` in pg_stat_activity until stopped; the max seen. */
function sampleConnections(adminUrl: string, applications: string[]) {
  let max = 0;
  let running = true;
  const done = (async () => {
    const client = new pg.Client({ connectionString: adminUrl });
    await client.connect();
    while (running) {
      const { rows } = await client.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = ANY($1)`,
        [applications],
      );
      max = Math.max(max, rows[0]!.n);
      await sleep(20);
    }
    await client.end();
  })();
  return {
    async stop() {
      running = false;
      await done;
      return max;
    },
  };
}

/** Fleet bench: keys fleet_idle_latency_p95_ms, fleet_connections_max, fleet_connection_budget, fleet_throughput_ratio. */
export async function fleetCases(size: FleetSize) {
  const adminUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  const base = `ao_bench_${process.pid}_fleet`;
  // Outside the glob (and marked a template): a fleet must never connect to a template.
  const template = `${base}tpl`;
  const names = Array.from(
    { length: size.databases },
    (_, i) => `${base}_${String(i).padStart(4, '0')}`,
  );
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  const dropAll = async () => {
    await admin.query(`ALTER DATABASE "${template}" IS_TEMPLATE false`).catch(() => undefined);
    for (const name of [...names, template])
      await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`).catch(() => undefined);
  };
  try {
    await dropAll();
    await admin.query(`CREATE DATABASE "${template}"`);
    const t = new pg.Client({ connectionString: urlOf(adminUrl, template) });
    await t.connect();
    await migrate(fromPg(t), { engine: 'claims' });
    await t.end();
    await admin.query(`ALTER DATABASE "${template}" IS_TEMPLATE true`);
    const made = Date.now();
    for (let i = 0; i < names.length; i += 4)
      await Promise.all(
        names
          .slice(i, i + 4)
          .map((name) => admin.query(`CREATE DATABASE "${name}" TEMPLATE "${template}"`)),
      );
    log(
      `fleet: ${names.length} databases made from one migrated template in ${((Date.now() - made) / 1000).toFixed(1)} s`,
    );

    // Phase 1: the idle trickle.
    const sampler = sampleConnections(adminUrl, [
      'agent-outbox-fleet',
      'agent-outbox-fleet-control',
    ]);
    const fleet = startChild(['fleet', adminUrl, `${base}_*`, String(BUDGET)]);
    const { startupMs } = await fleet.next((o) => o.ready === true);
    log(`fleet: started on ${names.length} databases, first pass over in ${String(startupMs)} ms`);
    const committed = new Map<string, number>();
    const order = [...names].sort(() => Math.random() - 0.5);
    const windowMs = size.trickleSeconds * 1000;
    const at = order.map(() => Math.random() * windowMs).sort((a, b) => a - b);
    const started = Date.now();
    await Promise.all(
      order.map(async (name, i) => {
        await sleep(at[i]!);
        const c = new pg.Client({ connectionString: urlOf(adminUrl, name) });
        await c.connect();
        await c.query('BEGIN');
        const { rows } = await c.query<{ id: string }>(
          `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('trickle', 'order.placed', '{}') RETURNING message_id::text AS id`,
        );
        const sent = Date.now();
        await c.query('COMMIT');
        committed.set(rows[0]!.id, sent);
        await c.end();
      }),
    );
    log(
      `fleet: trickle of ${names.length} messages written in ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
    await sleep(3_000);
    fleet.send('times');
    const { times } = (await fleet.next((o) => 'times' in o)) as { times: Record<string, number> };
    fleet.send('stats');
    const trickleStats = await fleet.next((o) => 'stats' in o);
    await fleet.stop();
    const latencies = [...committed].map(([id, sent]) =>
      times[id] === undefined ? Number.POSITIVE_INFINITY : times[id]! - sent,
    );
    const lost = latencies.filter((l) => !Number.isFinite(l)).length;
    const idle = percentiles(latencies.filter(Number.isFinite));
    log(
      `fleet: idle latency p50 ${idle.p50} ms, p95 ${idle.p95} ms, p99 ${idle.p99} ms over ${latencies.length} databases (${lost} not published)`,
    );

    // Phase 2: 10 busy databases among the idle ones.
    const busy = names.slice(0, BUSY);
    const load = async () => {
      await Promise.all(
        busy.map(async (name) => {
          const c = new pg.Client({ connectionString: urlOf(adminUrl, name) });
          await c.connect();
          await c.query(`TRUNCATE outbox, outbox_aggregates`);
          await c.query(
            `INSERT INTO outbox (aggregate_id, topic, payload, available_at)
             SELECT 'agg-' || (g % 500), 'order.placed', '{"n":1}', now() + interval '1 day'
             FROM generate_series(1, $1) g`,
            [size.busyMessages],
          );
          await c.query('VACUUM ANALYZE outbox');
          await c.end();
        }),
      );
    };
    const release = async () => {
      await Promise.all(
        busy.map(async (name) => {
          const c = new pg.Client({ connectionString: urlOf(adminUrl, name) });
          await c.connect();
          await c.query(`UPDATE outbox SET available_at = now() WHERE dispatched_at IS NULL`);
          await c.end();
        }),
      );
      return Date.now();
    };
    const total = BUSY * size.busyMessages;
    const fleetRates: number[] = [];
    const singleRates: number[] = [];
    for (let r = 0; r < size.rounds; r++) {
      // One process per database.
      await load();
      const singles = busy.map((name) => startChild(['single', urlOf(adminUrl, name)]));
      await Promise.all(singles.map((s) => s.next((o) => o.ready === true)));
      singles.forEach((s) => s.send(`count ${size.busyMessages}`));
      const go = await release();
      const done = await Promise.all(singles.map((s) => s.next((o) => 'doneAt' in o)));
      const end = Math.max(...done.map((d) => d.doneAt as number));
      singleRates.push(total / ((end - go) / 1000));
      await Promise.all(singles.map((s) => s.stop()));
      // The fleet process, serving all of them.
      await load();
      const f = startChild(['fleet', adminUrl, `${base}_*`, String(BUDGET)]);
      await f.next((o) => o.ready === true);
      f.send(`count ${total}`);
      const fgo = await release();
      const fdone = await f.next((o) => 'doneAt' in o);
      fleetRates.push(total / (((fdone.doneAt as number) - fgo) / 1000));
      await f.stop();
      log(
        `fleet: round ${r + 1}: ${BUSY} busy databases, ${total} messages: one process each ${Math.round(singleRates.at(-1)!)} msg/s, the fleet ${Math.round(fleetRates.at(-1)!)} msg/s`,
      );
    }
    const connectionsMax = await sampler.stop();
    const ratio = median(fleetRates) / median(singleRates);
    return {
      keys: {
        fleet_idle_latency_p95_ms: lost > 0 ? null : round(idle.p95, 1),
        fleet_connections_max: connectionsMax,
        fleet_connection_budget: BUDGET,
        fleet_throughput_ratio: round(ratio, 3),
      },
      details: {
        fleet: {
          databases: names.length,
          firstPassMs: startupMs,
          trickleSeconds: size.trickleSeconds,
          idleLatencyMs: idle,
          notPublished: lost,
          trickleServers: (trickleStats.stats as { ownedNames?: unknown }[]).map(
            ({ ownedNames: _names, ...rest }) => rest,
          ),
          busyDatabases: BUSY,
          busyMessagesEach: size.busyMessages,
          fleetRates: fleetRates.map(Math.round),
          onePerDatabaseRates: singleRates.map(Math.round),
        },
      },
    };
  } finally {
    await dropAll();
    await admin.end();
  }
}

/** The fleet group for main.ts: run when `--only` names `fleet` or on a full run. */
export async function fleetGroup(quick: boolean, names: Set<string> | null) {
  if (names && !names.has('fleet')) return { keys: {}, details: {} as Record<string, unknown> };
  return fleetCases(quick ? FLEET_QUICK : FLEET_FULL);
}

/** The fleet keys' rows of the table. */
export function fleetRows(r: Record<string, unknown>): string[] {
  const d = (
    r.details as {
      fleet?: { databases: number; onePerDatabaseRates: number[]; fleetRates: number[] };
    }
  ).fleet;
  if (!d) return [];
  const row = (key: string, baseline: string, target: string) =>
    `| ${key} | ${r[key] === null || r[key] === undefined ? 'n/a' : String(r[key])} | ${baseline} | ${target} |`;
  return [
    row(
      'fleet_idle_latency_p95_ms',
      `one message in each of ${d.databases} idle databases, commit → publish`,
      '≤ 1000',
    ),
    row(
      'fleet_connections_max',
      `pg_stat_activity, both phases; budget ${String(r.fleet_connection_budget)}`,
      '≤ budget',
    ),
    row(
      'fleet_throughput_ratio',
      `10 busy among ${d.databases}: fleet ${d.fleetRates.join(', ')} msg/s vs a process each ${d.onePerDatabaseRates.join(', ')}`,
      '≥ 0.8',
    ),
  ];
}
