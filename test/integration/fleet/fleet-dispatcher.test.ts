import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { InMemoryPublisher } from '../../../src/index.js';
import { createFleetDispatcher, type FleetDispatcher } from '../../../src/fleet/index.js';
import { commitMessages, tenantFamily } from '../../helpers/tenant-databases.js';

const family = tenantFamily();

async function until(check: () => boolean | Promise<boolean>, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('fleet dispatcher (one process)', () => {
  let fleet: FleetDispatcher | undefined;
  beforeAll(async () => {
    for (let n = 0; n < 6; n++) await family.create(n);
  });
  afterAll(async () => {
    await fleet?.stop();
    await family.dropAll();
  });

  it('serves every matching database, finds a new one and lets a dropped one go, within its budget', async () => {
    const publisher = new InMemoryPublisher();
    // Written before the start: served on the first pass.
    const before = await commitMessages(family.url(family.name(0)), [
      { topic: 'mail.send', aggregateId: 'a', payload: { n: 1 } },
      { topic: 'mail.send', aggregateId: 'a', payload: { n: 2 } },
    ]);
    fleet = createFleetDispatcher({
      servers: [inject('adminDatabaseUrl')],
      databases: family.glob,
      publisher,
      maxConnections: 3,
      discoverIntervalMs: 300,
      leaseMs: 3_000,
      pollIntervalMs: 100,
      warmMs: 200,
    });
    const seen: string[] = [];
    fleet.on('fleet:target:discovered', ({ target }) => seen.push(`+${target.name}`));
    fleet.on('fleet:target:gone', ({ target }) => seen.push(`-${target.name}`));
    await fleet.start();
    await until(() => before.every((id) => publisher.published.some((m) => m.id === id)));
    expect(fleet.servers()[0]!.discovered).toBe(6);

    // One message in each idle database, one at a time: each found by the activity probe.
    const ids: string[] = [];
    for (let n = 0; n < 6; n++)
      ids.push(
        ...(await commitMessages(family.url(family.name(n)), [
          { topic: 'order.placed', aggregateId: `o${n}`, payload: { n } },
        ])),
      );
    await until(() => ids.every((id) => publisher.published.some((m) => m.id === id)));

    // A database created while it runs is served without a restart.
    const late = await family.create(7);
    const lateIds = await commitMessages(family.url(late), [
      { topic: 'order.placed', aggregateId: 'late', payload: {} },
    ]);
    await until(() => lateIds.every((id) => publisher.published.some((m) => m.id === id)));
    expect(seen).toContain(`+${late}`);

    // A dropped one is let go (an idle tenant holds no connection, so a plain DROP works).
    await until(() => fleet!.servers()[0]!.connected === 0, 10_000);
    await family.drop(family.name(3));
    await until(() => seen.includes(`-${family.name(3)}`));
    await until(() => !fleet!.servers()[0]!.ownedNames.includes(family.name(3)));

    const server = fleet.servers()[0]!;
    expect(server.connectionsHighWater).toBeLessThanOrEqual(3);
    // Each message once.
    const all = [...before, ...ids, ...lateIds];
    for (const id of all) expect(publisher.published.filter((m) => m.id === id)).toHaveLength(1);
  });
});
