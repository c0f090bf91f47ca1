import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startCli } from '../../helpers/cli-process.js';
import { freePort } from '../../helpers/postgres-server.js';
import { checkHistory } from '../../helpers/history.js';
import { tenantFamily, writeTenantRounds } from '../../helpers/tenant-databases.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

const family = tenantFamily();
const TENANTS = 20;
const BUDGET = 4;
let receiver: WebhookReceiver;
let controlUrl: string;

beforeAll(async () => {
  receiver = await startWebhookReceiver({ holdMs: () => Math.random() * 2 });
  await family.createMany(TENANTS);
  controlUrl = await family.createControl();
}, 120_000);
afterAll(async () => {
  await receiver.close();
  await family.dropAll();
});

describe('outbox dispatch --databases', () => {
  it('serves 20 busy databases on a budget of 4 connections (counted in pg_stat_activity), every message once and in order', async () => {
    const metricsPort = await freePort();
    const dispatcher = startCli([
      'dispatch',
      '--database-url',
      controlUrl,
      '--databases',
      family.glob,
      '--publisher',
      receiver.url,
      '--max-connections',
      String(BUDGET),
      '--poll-interval-ms',
      '50',
      '--discover-interval',
      '1s',
      '--metrics-port',
      String(metricsPort),
    ]);
    const prefix = family.glob.slice(0, -1);
    const controlName = new URL(controlUrl).pathname.slice(1);
    const observer = new pg.Client({ connectionString: family.url('postgres') });
    await observer.connect();
    let maxSeen = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const { rows } = await observer.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
           WHERE (datname LIKE $1 || '%' OR datname = $2) AND application_name LIKE 'agent-outbox%'`,
          [prefix, controlName],
        );
        maxSeen = Math.max(maxSeen, rows[0]!.n);
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    // 12 rounds: a transaction of 5 messages on 2 aggregates in every database each round.
    const expected = await writeTenantRounds(family, {
      tenants: TENANTS,
      rounds: 12,
      perTransaction: 5,
    });
    await expect
      .poll(() => receiver.distinct(), { timeout: 120_000, interval: 200 })
      .toBe(expected.length);
    sampling = false;
    await sampler;
    // The metrics carry the database label; the connection gauges stay within the budget.
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    expect(metrics).toMatch(
      new RegExp(`outbox_messages_published_total\\{database="${family.name(0)}"\\} 60`),
    );
    const highWater = Number(
      /outbox_fleet_connections_high_water\{[^}]*\} (\d+)/.exec(metrics)?.[1],
    );
    expect(highWater).toBeLessThanOrEqual(BUDGET);
    expect((await fetch(`http://127.0.0.1:${metricsPort}/healthz`)).status).toBe(200);
    await observer.end();
    dispatcher.child.kill('SIGTERM');
    expect(await dispatcher.exited, dispatcher.output()).toBe(0);

    const report = checkHistory(expected, receiver.events);
    expect(report.lost).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    expect(report.duplicates).toBe(0);
    console.log(
      `[fleet budget] ${TENANTS} databases, budget ${BUDGET}: at most ${maxSeen} connections seen`,
    );
    expect(maxSeen).toBeGreaterThan(1);
    expect(maxSeen).toBeLessThanOrEqual(BUDGET);
  }, 180_000);

  it('refuses bad fleet flags with a usage error', async () => {
    const run = async (...args: string[]) => {
      const p = startCli([
        'dispatch',
        '--database-url',
        controlUrl,
        '--publisher',
        receiver.url,
        ...args,
      ]);
      return { code: await p.exited, output: p.output() };
    };
    const both = await run('--databases', 'a*', '--schemas', 'b*');
    expect(both.code).toBe(2);
    expect(both.output).toMatch(/not both/);
    const cdc = await run('--databases', 'a*', '--mode', 'cdc');
    expect(cdc.code).toBe(2);
    expect(cdc.output).toMatch(/replication slot per database/);
    const budget = await run('--databases', 'a*', '--max-connections', '1');
    expect(budget.code).toBe(2);
    expect(budget.output).toMatch(/at least 2/);
    const twoUrls = await run('--database-url', controlUrl);
    expect(twoUrls.code).toBe(2);
    expect(twoUrls.output).toMatch(/fleet mode only/);
  });
});
