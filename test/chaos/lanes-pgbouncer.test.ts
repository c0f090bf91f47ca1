import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EnqueuedMessage } from '../../src/index.js';
import { startCli, startScript, type CliProcess } from '../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { enqueueLanes, laneDispatchArgs, lanesPending } from '../helpers/lanes.js';
import { requirePgBouncer, startPgBouncer, type PgBouncer } from '../helpers/pgbouncer.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

/**
 * The lanes engine through PgBouncer 1.18 in transaction mode (4 server connections, no
 * prepared statements), as test/integration/pooler/ runs the claim engine: 4 writers
 * (`fromPg(client, { preparedStatements: false })`) committing while two dispatchers publish,
 * both through the pooler — `outbox dispatch --engine lanes --no-listen` and a
 * `createLaneDispatcher({ asyncCommit: true })` process (the one call that sets a setting:
 * `set_config('synchronous_commit', 'off', true)`). The CLI dispatcher is killed with SIGKILL
 * mid-run, a third takes its place. Then: every message delivered, in each aggregate's order,
 * never in flight twice; and no setting left on any of PgBouncer's server connections.
 */
const runs = requirePgBouncer();
const script = fileURLToPath(new URL('../helpers/lane-dispatch-process.ts', import.meta.url));

const AGGREGATES = 20;
const PER_AGGREGATE = 20;
const TOTAL = AGGREGATES * PER_AGGREGATE;
const LEASE_MS = 3_000;

let db: TestDatabase;
let bouncer: PgBouncer;
let pooled: pg.Pool;
let receiver: WebhookReceiver;
const processes: CliProcess[] = [];

beforeAll(async () => {
  if (!runs) return;
  db = await createTestDatabase();
  bouncer = await startPgBouncer(db.url);
  pooled = new pg.Pool({ connectionString: bouncer.url(db.url), max: 8 });
  pooled.on('error', () => undefined);
  receiver = await startWebhookReceiver({ holdMs: () => 1 });
});
afterAll(async () => {
  if (!runs) return;
  for (const p of processes) {
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
    await p.exited;
  }
  await receiver?.close();
  await pooled?.end();
  await bouncer?.stop();
  await db?.drop();
});

/** The settings a lane call could leave behind, as a session sees them. */
const SETTINGS = `SELECT pg_backend_pid() AS pid,
  current_setting('synchronous_commit') AS synchronous_commit, current_setting('jit') AS jit,
  current_setting('enable_seqscan') AS enable_seqscan,
  current_setting('enable_bitmapscan') AS enable_bitmapscan,
  current_setting('transaction_isolation') AS transaction_isolation`;

describe.runIf(runs)('lanes engine through PgBouncer in transaction mode', () => {
  it('writers and dispatchers through the pooler, kill -9 of one: nothing lost, order kept, no session state left', async () => {
    const pooledUrl = bouncer.url(db.url);
    // Each dispatcher publishes to its own path: the receiver tells who delivered what.
    const to = (path: string) => receiver.url.replace(/\/hook$/, path);
    const cliArgs = (path: string) =>
      laneDispatchArgs(
        pooledUrl,
        to(path),
        '--no-listen',
        '--lease-ms',
        String(LEASE_MS),
        '--batch-size',
        '20',
      );
    const first = startCli(cliArgs('/first'));
    const asyncOne = startScript(script, [pooledUrl, to('/async'), String(LEASE_MS), '20', 'true']);
    processes.push(first, asyncOne);

    // 4 writers, transactions of 4 messages of one aggregate: 100 transactions in all.
    const written: EnqueuedMessage[] = [];
    const batches: [number, number][] = [];
    for (let from = 0; from < PER_AGGREGATE; from += 4)
      for (let a = 0; a < AGGREGATES; a++) batches.push([a, from]);
    const writers = Promise.all(
      Array.from({ length: 4 }, async () => {
        for (let next = batches.shift(); next; next = batches.shift()) {
          const [a, from] = next;
          written.push(
            ...(await enqueueLanes(
              pooled,
              Array.from({ length: 4 }, (_, i) => ({
                topic: 'payment.charge',
                aggregateId: `agg-${a}`,
                payload: { n: from + i },
              })),
              { preparedStatements: false },
            )),
          );
          await new Promise((resolve) => setTimeout(resolve, 150));
        }
      }),
    );

    // kill -9 of the CLI dispatcher while it publishes and the writers write.
    const by = (path: string) => receiver.events.filter((e) => e.via === path).length;
    await expect.poll(() => by('/first'), { timeout: 30_000, interval: 20 }).toBeGreaterThan(40);
    first.child.kill('SIGKILL');
    expect(await first.exited).toBe('SIGKILL');
    const killedAt = receiver.distinct();
    const writtenAtKill = written.length;
    const third = startCli(cliArgs('/third'));
    processes.push(third);
    await writers;
    const writtenAt = receiver.distinct();
    try {
      await expect.poll(() => receiver.distinct(), { timeout: 45_000, interval: 100 }).toBe(TOTAL);
    } catch (error) {
      process.stderr.write(
        `third:\n${third.output().slice(-2_000)}\nasync:\n${asyncOne.output().slice(-2_000)}\n`,
      );
      throw error;
    }
    await expect.poll(() => lanesPending(db.pool), { timeout: 30_000 }).toBe(0);

    const report = checkHistory(expectedOf(written), receiver.events);
    const perAggregate = new Map<string, number[]>();
    for (const m of written)
      perAggregate.set(m.aggregateId, [...(perAggregate.get(m.aggregateId) ?? []), m.sequence]);
    console.log(
      `[lanes pgbouncer] messages ${written.length}, delivered ${receiver.distinct()} ` +
        `(${receiver.events.length} deliveries, ${report.duplicates} duplicates); lost ` +
        `${report.lost.length}, out of order ${report.orderViolations.length}, concurrent ` +
        `duplicates ${report.concurrentDuplicates.length}; kill -9 at ${killedAt} delivered of ` +
        `${writtenAtKill} written, writers done at ${writtenAt} delivered; deliveries by the ` +
        `killed CLI ${by('/first')}, async ${by('/async')}, third ${by('/third')}`,
    );
    expect(written).toHaveLength(TOTAL);
    // Each aggregate numbered 1..20 by the writers through the pooler.
    for (const sequences of perAggregate.values())
      expect([...sequences].sort((x, y) => x - y)).toEqual(
        Array.from({ length: PER_AGGREGATE }, (_, i) => i + 1),
      );
    expect(report.lost).toEqual([]);
    expect(report.unexpected).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    const output = [first, asyncOne, third].map((p) => p.output()).join('\n');
    expect(output).not.toMatch(/prepared statement|claim failure|error/i);

    // Every server connection PgBouncer holds (4): 4 transactions open at once get all of
    // them, each must see the server's defaults (read on a direct connection).
    const defaults = (await db.pool.query<Record<string, string>>(SETTINGS)).rows[0]!;
    const clients = await Promise.all(Array.from({ length: 4 }, () => pooled.connect()));
    try {
      for (const c of clients) await c.query('BEGIN');
      const seen = await Promise.all(
        clients.map(async (c) => (await c.query<Record<string, string>>(SETTINGS)).rows[0]!),
      );
      for (const c of clients) await c.query('COMMIT');
      expect(new Set(seen.map((s) => s.pid)).size).toBe(4);
      for (const s of seen) expect({ ...s, pid: 0 }).toEqual({ ...defaults, pid: 0 });
      console.log(
        `[lanes pgbouncer] server connections checked ${seen.length}: ${JSON.stringify({ ...defaults, pid: undefined })}`,
      );
    } finally {
      for (const c of clients) c.release();
    }

    for (const p of [asyncOne, third]) p.child.kill('SIGTERM');
    expect(await Promise.all([asyncOne.exited, third.exited])).toEqual([0, 0]);
  }, 120_000);
});
