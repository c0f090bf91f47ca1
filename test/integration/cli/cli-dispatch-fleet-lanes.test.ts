import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { fromPg, migrate } from '../../../src/index.js';
import { startCli, type CliProcess } from '../../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { freePort } from '../../helpers/postgres-server.js';
import { checkHistory, type ExpectedMessage } from '../../helpers/history.js';
import {
  commitWithSequences,
  tenantFamily,
  writeTenantRounds,
} from '../../helpers/tenant-databases.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

/**
 * `outbox dispatch --engine lanes` in fleet mode: tenants written with the lanes writer, served
 * by a CLI process of its own on a budget of connections counted in pg_stat_activity.
 */
const BUDGET = 3;
let receiver: WebhookReceiver;
let observer: pg.Client;

beforeAll(async () => {
  receiver = await startWebhookReceiver({ holdMs: () => Math.random() * 2 });
  observer = new pg.Client({ connectionString: tenantFamily().url('postgres') });
  await observer.connect();
});
afterAll(async () => {
  await observer?.end();
  await receiver.close();
});

/** The fleet process's connections now: to a database `LIKE prefix%`, or to `exact`. */
async function connections(prefix: string, exact: string): Promise<number> {
  const { rows } = await observer.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity
     WHERE (datname LIKE $1 || '%' OR datname = $2) AND application_name LIKE 'agent-outbox%'`,
    [prefix, exact],
  );
  return rows[0]!.n;
}

/** Samples {@link connections} every 10 ms until the returned stop() is called; the most seen. */
function sample(prefix: string, exact: string): () => Promise<number> {
  let max = 0;
  let sampling = true;
  const loop = (async () => {
    while (sampling) {
      max = Math.max(max, await connections(prefix, exact));
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  return async () => {
    sampling = false;
    await loop;
    return max;
  };
}

function startFleet(
  url: string,
  scope: string[],
  extra: string[] = [],
  engine: string[] = ['--engine', 'lanes'],
): CliProcess {
  return startCli([
    'dispatch',
    ...engine,
    '--database-url',
    url,
    ...scope,
    '--publisher',
    receiver.url,
    '--max-connections',
    String(BUDGET),
    '--poll-interval-ms',
    '50',
    '--discover-interval',
    '1s',
    ...extra,
  ]);
}

/**
 * Every message delivered once and in order; then, the tenants idle, the process holds its
 * control connection only (a lanes turn writes even when it finds nothing — its lanes taken and
 * given back — and those writes must not wake the tenant again and again).
 */
async function expectDeliveredThenIdle(
  expected: ExpectedMessage[],
  prefix: string,
  exact: string,
): Promise<void> {
  const ids = new Set(expected.map((m) => m.messageId));
  const report = checkHistory(
    expected,
    receiver.events.filter((e) => ids.has(e.messageId)),
  );
  expect(report.lost).toEqual([]);
  expect(report.orderViolations).toEqual([]);
  expect(report.concurrentDuplicates).toEqual([]);
  expect(report.duplicates).toBe(0);
  // warmMs (5 s) after the last publish every tenant closes; then none reconnects.
  await expect.poll(() => connections(prefix, exact), { timeout: 15_000, interval: 100 }).toBe(1);
  const stop = sample(prefix, exact);
  await new Promise((r) => setTimeout(r, 3_000));
  expect(await stop(), 'connections while every tenant is idle').toBe(1);
}

/**
 * Writes `rounds` rounds of four messages (two aggregates) into each schema, all schemas at once
 * a round, with `engine(n)`'s writer; waits until the receiver has every one. The messages.
 */
async function writeSchemaRounds(
  url: string,
  schemas: number,
  rounds: number,
  schemaOf: (n: number) => string,
  engineOf: (n: number) => 'claims' | 'lanes',
): Promise<ExpectedMessage[]> {
  const expected: ExpectedMessage[] = [];
  for (let round = 0; round < rounds; round++)
    await Promise.all(
      Array.from({ length: schemas }, async (_, n) => {
        const written = await commitWithSequences(
          url,
          Array.from({ length: 4 }, (_, i) => ({
            topic: 'payment.charge',
            aggregateId: `${n}:agg-${i % 2}`,
            payload: { round, i },
          })),
          { engine: engineOf(n), schema: schemaOf(n) },
        );
        for (const m of written) expected.push({ ...m, ordered: true });
      }),
    );
  const ids = new Set(expected.map((m) => m.messageId));
  await expect
    .poll(
      () =>
        new Set(receiver.events.filter((e) => ids.has(e.messageId)).map((e) => e.messageId)).size,
      { timeout: 30_000, interval: 200 },
    )
    .toBeGreaterThanOrEqual(expected.length);
  return expected;
}

describe('outbox dispatch --engine lanes --databases', () => {
  const family = tenantFamily();
  const TENANTS = 12;
  let controlUrl: string;
  beforeAll(async () => {
    await family.createMany(TENANTS);
    controlUrl = await family.createControl();
  }, 120_000);
  afterAll(() => family.dropAll());

  it(`serves ${TENANTS} lanes databases on a budget of ${BUDGET} connections: every message once, in order, then idle`, async () => {
    const metricsPort = await freePort();
    const fleet = startFleet(
      controlUrl,
      ['--databases', family.glob],
      ['--metrics-port', String(metricsPort)],
    );
    const prefix = family.glob.slice(0, -1);
    const controlName = new URL(controlUrl).pathname.slice(1);
    const stop = sample(prefix, controlName);
    try {
      await expect.poll(() => fleet.output(), { timeout: 20_000 }).toContain('lanes fleet');
      const expected = await writeTenantRounds(family, {
        tenants: TENANTS,
        rounds: 8,
        perTransaction: 5,
        engine: 'lanes',
      });
      await expect
        .poll(() => receiver.distinct(), { timeout: 60_000, interval: 200 })
        .toBe(expected.length);
      const maxSeen = await stop();
      console.log(
        `[lanes fleet] ${TENANTS} databases, budget ${BUDGET}: at most ${maxSeen} connections seen`,
      );
      expect(maxSeen).toBeGreaterThan(1);
      expect(maxSeen).toBeLessThanOrEqual(BUDGET);
      const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
      expect(metrics).toMatch(
        new RegExp(`outbox_messages_published_total\\{database="${family.name(0)}"\\} 40`),
      );
      await expectDeliveredThenIdle(expected, prefix, controlName);
    } finally {
      await stop();
      fleet.child.kill('SIGTERM');
      expect(await fleet.exited, fleet.output()).toBe(0);
    }
  }, 120_000);
});

describe('outbox dispatch --engine lanes --schemas', () => {
  const SCHEMAS = 8;
  let db: TestDatabase;
  const schema = (n: number) => `tnl_${n}`;
  beforeAll(async () => {
    db = await createTestDatabase({ migrated: false });
    for (let n = 0; n < SCHEMAS; n++) await migrate(fromPg(db.pool), { schema: schema(n) });
  }, 120_000);
  afterAll(() => db?.drop());

  it(`serves ${SCHEMAS} lanes schemas on a budget of ${BUDGET}, woken by lanes inserts (not the idle poll)`, async () => {
    const fleet = startFleet(db.url, ['--schemas', 'tnl_*']);
    const stop = sample(db.name, db.name);
    try {
      await expect.poll(() => fleet.output(), { timeout: 20_000 }).toContain('lanes fleet');
      // Written after the fleet's first pass: only the activity probe (lanes inserts) can wake
      // each schema within the timeout; the idle poll is a minute away.
      await new Promise((r) => setTimeout(r, 2_000));
      const expected = await writeSchemaRounds(db.url, SCHEMAS, 6, schema, () => 'lanes');
      const maxSeen = await stop();
      expect(maxSeen).toBeGreaterThan(1);
      expect(maxSeen).toBeLessThanOrEqual(BUDGET);
      await expectDeliveredThenIdle(expected, db.name, db.name);
    } finally {
      await stop();
      fleet.child.kill('SIGTERM');
      expect(await fleet.exited, fleet.output()).toBe(0);
    }
  }, 120_000);
});

describe('outbox dispatch --schemas without --engine: each schema by its record', () => {
  const SCHEMAS = 4;
  let db: TestDatabase;
  const schema = (n: number) => `tnr_${n}`;
  // Even schemas on the claim engine, odd ones on the lanes engine (a new schema's default).
  const engineOf = (n: number) => (n % 2 === 0 ? 'claims' : 'lanes');
  beforeAll(async () => {
    db = await createTestDatabase({ migrated: false });
    for (let n = 0; n < SCHEMAS; n++)
      await migrate(fromPg(db.pool), {
        schema: schema(n),
        ...(engineOf(n) === 'claims' && { engine: 'claims' as const }),
      });
  }, 120_000);
  afterAll(() => db?.drop());

  it('serves claims and lanes schemas in one fleet on one budget, woken by either engine’s writes', async () => {
    const fleet = startFleet(db.url, ['--schemas', 'tnr_*'], [], []);
    const stop = sample(db.name, db.name);
    try {
      await expect
        .poll(() => fleet.output(), { timeout: 20_000 })
        .toContain('schemas tnr_*, each on the engine it records,');
      // After the fleet's first pass: only the activity probe can wake each schema in time.
      await new Promise((r) => setTimeout(r, 2_000));
      const expected = await writeSchemaRounds(db.url, SCHEMAS, 4, schema, engineOf);
      const maxSeen = await stop();
      expect(maxSeen).toBeLessThanOrEqual(BUDGET);
      await expectDeliveredThenIdle(expected, db.name, db.name);
    } finally {
      await stop();
      fleet.child.kill('SIGTERM');
      expect(await fleet.exited, fleet.output()).toBe(0);
    }
  }, 120_000);
});
