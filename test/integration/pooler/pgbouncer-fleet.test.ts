import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli } from '../../helpers/cli-process.js';
import { checkHistory } from '../../helpers/history.js';
import { requirePgBouncer, startPgBouncer, type PgBouncer } from '../../helpers/pgbouncer.js';
import { tenantFamily, writeTenantRounds } from '../../helpers/tenant-databases.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

/**
 * Fleet mode through a transaction pooler (issues 40 and 41): `outbox dispatch --databases GLOB`
 * given PgBouncer's URL (1.18, transaction mode, 4 server connections per database, no
 * prepared-statement support) serves every tenant database through it: discovery and the
 * activity probe, the ownership tables in the control database, claims and settles, the stats
 * flush after a turn. Nothing of it may rely on a session: every message once, in order, and no
 * pooler error in the dispatcher's output.
 */
const runs = requirePgBouncer();
const family = tenantFamily();
const TENANTS = 6;
let receiver: WebhookReceiver;
let controlUrl: string;
let bouncer: PgBouncer | undefined;

beforeAll(async () => {
  if (!runs) return;
  receiver = await startWebhookReceiver({ holdMs: () => Math.random() * 2 });
  await family.createMany(TENANTS);
  controlUrl = await family.createControl();
  bouncer = await startPgBouncer(controlUrl);
}, 120_000);
afterAll(async () => {
  if (!runs) return;
  await bouncer?.stop();
  await receiver?.close();
  await family.dropAll();
});

describe.runIf(runs)('outbox dispatch --databases through PgBouncer (transaction mode)', () => {
  it('serves every tenant database through the pooler: every message once, in order', async () => {
    const dispatcher = startCli([
      'dispatch',
      '--database-url',
      bouncer!.url(controlUrl),
      '--databases',
      family.glob,
      '--no-listen',
      '--publisher',
      receiver.url,
      '--max-connections',
      '3',
      '--poll-interval-ms',
      '50',
      '--discover-interval',
      '1s',
    ]);
    try {
      const expected = await writeTenantRounds(family, {
        tenants: TENANTS,
        rounds: 8,
        perTransaction: 4,
        pauseMs: 100,
      });
      await expect
        .poll(() => receiver.distinct(), { timeout: 120_000, interval: 200 })
        .toBe(expected.length);
      dispatcher.child.kill('SIGTERM');
      expect(await dispatcher.exited, dispatcher.output()).toBe(0);
      const report = checkHistory(expected, receiver.events);
      expect(report.lost).toEqual([]);
      expect(report.orderViolations).toEqual([]);
      expect(report.concurrentDuplicates).toEqual([]);
      expect(dispatcher.output()).not.toMatch(/prepared statement|OutboxPoolerError|pooler/i);
      console.log(
        `[fleet via pgbouncer] ${TENANTS} databases, ${expected.length} messages once each, in order`,
      );
    } finally {
      if (dispatcher.child.exitCode === null) dispatcher.child.kill('SIGKILL');
    }
  }, 180_000);
});
