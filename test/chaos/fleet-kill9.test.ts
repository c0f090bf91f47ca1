import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { performance } from 'node:perf_hooks';
import { startCli, type CliProcess } from '../helpers/cli-process.js';
import { checkHistory, type ExpectedMessage } from '../helpers/history.js';
import {
  commitWithSequences,
  tenantFamily,
  type TenantEngine,
} from '../helpers/tenant-databases.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

/**
 * Fleet processes sharing 50 tenant databases (issue 40): each database served by one process at
 * a time, spread evenly, a joining process given its share within a lease, a process killed -9
 * mid-run taken over within its lease — and through it all every message delivered, in order,
 * never in flight twice at once (the history checker).
 */
const TENANTS = 50;
const LEASE_MS = 6_000;
const family = tenantFamily();
let receiver: WebhookReceiver;
let control: pg.Client;
let controlUrl: string;

beforeAll(async () => {
  receiver = await startWebhookReceiver({ holdMs: () => Math.random() * 3 });
  await family.createMany(TENANTS);
  controlUrl = await family.createControl();
  control = new pg.Client({ connectionString: controlUrl });
  control.on('error', () => undefined);
  await control.connect();
}, 180_000);
afterAll(async () => {
  await receiver.close();
  await control?.end();
  await family.dropAll();
});

function startMember(engine: TenantEngine): CliProcess {
  return startCli([
    'dispatch',
    '--engine',
    engine,
    '--database-url',
    controlUrl,
    '--databases',
    family.glob,
    '--publisher',
    receiver.url,
    '--max-connections',
    '4',
    '--lease-ms',
    String(LEASE_MS),
    '--poll-interval-ms',
    '50',
    '--discover-interval',
    '2s',
  ]);
}

/** Live owners' tenant counts (member → count): owners rows of members whose lease runs. */
async function ownership(engine: TenantEngine): Promise<Map<string, number>> {
  const exists = await control.query(`SELECT to_regclass('agent_outbox_fleet.owners') AS t`);
  if (!exists.rows[0].t) return new Map();
  const { rows } = await control.query<{ member: string; n: number }>(
    `SELECT o.member, count(*)::int AS n FROM agent_outbox_fleet.owners o
     JOIN agent_outbox_fleet.members m ON m.scope = o.scope AND m.member = o.member
     WHERE m.expires_at > now() AND o.scope = $1 GROUP BY o.member`,
    [`db:${family.glob}:public${engine === 'lanes' ? ':lanes' : ''}`],
  );
  return new Map(rows.map((r) => [r.member, r.n]));
}

async function waitForSpread(
  members: number,
  timeoutMs: number,
  engine: TenantEngine,
): Promise<number> {
  const started = performance.now();
  for (;;) {
    const owners = await ownership(engine);
    const counts = [...owners.values()];
    const total = counts.reduce((a, b) => a + b, 0);
    if (
      owners.size === members &&
      total === TENANTS &&
      Math.max(...counts) - Math.min(...counts) <= 1
    )
      return performance.now() - started;
    if (performance.now() - started > timeoutMs)
      throw new Error(`no even spread over ${members} members: ${JSON.stringify([...owners])}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// The lanes engine's fleet (its own ownership scope) on the same 50 databases, after the claim
// engine's runs: written with the lanes writer, served by `--engine lanes` processes.
describe.each([
  { processes: 2, engine: 'claims' as const, title: '' },
  { processes: 3, engine: 'claims' as const, title: '' },
  { processes: 2, engine: 'lanes' as const, title: ', lanes engine' },
])('$processes fleet processes on 50 databases$title', ({ processes, engine }) => {
  it('spread evenly, rebalanced on a join, taken over after kill -9: none lost, in order, none in flight twice', async () => {
    const members: CliProcess[] = [];
    for (let i = 0; i < processes - 1; i++) members.push(startMember(engine));
    await waitForSpread(processes - 1, 60_000, engine);

    const expected: ExpectedMessage[] = [];
    const committedAt = new Map<string, number>();
    let writing = true;
    const writer = (async () => {
      let round = 0;
      while (writing) {
        const n = round++ % TENANTS;
        const aggregate = `${n}:agg-${Math.floor(Math.random() * 4)}`;
        const written = await commitWithSequences(
          family.url(family.name(n)),
          [
            { topic: 'payment.charge', aggregateId: aggregate, payload: { round } },
            { topic: 'payment.charge', aggregateId: aggregate, payload: { round, second: true } },
          ],
          { engine },
        );
        const at = performance.now();
        for (const m of written) {
          expected.push({ ...m, ordered: true });
          committedAt.set(m.messageId, at);
        }
        await new Promise((r) => setTimeout(r, 10));
      }
    })();

    await new Promise((r) => setTimeout(r, 2_000));
    const joinedAt = performance.now();
    members.push(startMember(engine));
    const rebalanceMs = await waitForSpread(processes, 3 * LEASE_MS, engine);
    const rebalancedAt = performance.now();

    await new Promise((r) => setTimeout(r, 2_000));
    const victim = members.shift()!;
    victim.child.kill('SIGKILL');
    const killedAt = performance.now();
    const takeoverMs = await waitForSpread(processes - 1, 3 * LEASE_MS, engine);

    await new Promise((r) => setTimeout(r, 2_000));
    writing = false;
    await writer;
    const received = () => new Set(receiver.events.map((e) => e.messageId));
    await expect
      .poll(() => expected.filter((e) => !received().has(e.messageId)).length, {
        timeout: 60_000,
        interval: 200,
      })
      .toBe(0);
    for (const m of members) m.child.kill('SIGTERM');
    const codes = await Promise.all(members.map((m) => m.exited));
    expect(codes, members.map((m) => m.output()).join('\n---\n')).toEqual(members.map(() => 0));

    const ids = new Set(expected.map((e) => e.messageId));
    const report = checkHistory(
      expected,
      receiver.events.filter((e) => ids.has(e.messageId)),
    );
    // Commit → first delivery of what was written while a process joined: no pause past a lease.
    const firstSeen = new Map<string, number>();
    for (const e of receiver.events)
      if (!firstSeen.has(e.messageId)) firstSeen.set(e.messageId, e.end);
    const duringJoin = [...committedAt].filter(([, at]) => at >= joinedAt && at <= rebalancedAt);
    const joinPause = Math.max(0, ...duringJoin.map(([id, at]) => firstSeen.get(id)! - at));
    const afterKill = [...committedAt].filter(([, at]) => at >= killedAt);
    const killPause = Math.max(0, ...afterKill.map(([id, at]) => firstSeen.get(id)! - at));
    console.log(
      `[fleet ${processes} processes, ${engine}] ${expected.length} messages; join: spread in ${rebalanceMs.toFixed(0)} ms, ` +
        `slowest message written meanwhile ${joinPause.toFixed(0)} ms; kill -9: taken over in ${takeoverMs.toFixed(0)} ms, ` +
        `slowest message written after ${killPause.toFixed(0)} ms; duplicates ${report.duplicates} (lease ${LEASE_MS} ms)`,
    );
    expect(report.lost).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    expect(duringJoin.length).toBeGreaterThan(0);
    expect(joinPause).toBeLessThan(LEASE_MS);
    // The dead member's tenants are free when its leases run out; the next round takes them.
    expect(takeoverMs).toBeLessThan(LEASE_MS + LEASE_MS / 3 + 2_000);
  }, 240_000);
});
