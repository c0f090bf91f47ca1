import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { inject } from 'vitest';
import { fromPg, InMemoryPublisher, migrate } from '../../../src/index.js';
import { createTestDatabase } from '../../helpers/database.js';
import { enqueueCommitted } from '../../helpers/outbox-fixtures.js';
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

    // Its own writes (leases, the settle) do not wake a tenant once more: one connection per
    // message in an idle database.
    const connections = new Map<string, number>();
    fleet.on('fleet:target:connected', ({ target }) =>
      connections.set(target.name, (connections.get(target.name) ?? 0) + 1),
    );
    await until(() => fleet!.servers()[0]!.connected === 0, 10_000);
    const one = await commitMessages(family.url(family.name(5)), [
      { topic: 'order.placed', aggregateId: 'one', payload: {} },
    ]);
    await until(() => publisher.published.some((m) => m.id === one[0]));
    await new Promise((r) => setTimeout(r, 2_000));
    expect(connections.get(family.name(5))).toBe(1);

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

describe('fleet dispatcher over schemas (a schema per tenant)', () => {
  it('serves every matching schema with an outbox, finds a new one and lets a dropped one go', async () => {
    const db = await createTestDatabase({ migrated: false });
    const publisher = new InMemoryPublisher();
    let fleet: FleetDispatcher | undefined;
    try {
      for (const s of ['tnt_a', 'tnt_b'])
        await migrate(fromPg(db.pool), { schema: s, engine: 'claims' });
      // A schema that matches but has no outbox is not a tenant (yet).
      await db.pool.query('CREATE SCHEMA tnt_empty');
      const seen: string[] = [];
      fleet = createFleetDispatcher({
        servers: [db.url],
        schemas: 'tnt_*',
        publisher,
        maxConnections: 3,
        discoverIntervalMs: 300,
        leaseMs: 3_000,
        pollIntervalMs: 100,
        warmMs: 200,
      });
      fleet.on('fleet:target:discovered', ({ target }) => seen.push(`+${target.schema}`));
      fleet.on('fleet:target:gone', ({ target }) => seen.push(`-${target.schema}`));
      await fleet.start();
      expect(fleet.servers()[0]!.discovered).toBe(2);
      const enqueueIn = async (schema: string) =>
        (
          await enqueueCommitted(
            db.pool,
            [{ topic: 'mail.send', aggregateId: schema, payload: { schema } }],
            schema,
          )
        )[0]!.messageId;
      const a = await enqueueIn('tnt_a');
      const b = await enqueueIn('tnt_b');
      await until(() => [a, b].every((id) => publisher.published.some((m) => m.id === id)));

      await migrate(fromPg(db.pool), { schema: 'tnt_c', engine: 'claims' });
      const c = await enqueueIn('tnt_c');
      await until(() => publisher.published.some((m) => m.id === c));
      expect(seen).toContain('+tnt_c');
      expect(seen).not.toContain('+tnt_empty');

      await until(() => fleet!.servers()[0]!.connected === 0, 10_000);
      await db.pool.query('DROP SCHEMA tnt_b CASCADE');
      await until(() => seen.includes('-tnt_b'));
      await until(() => !fleet!.servers()[0]!.ownedNames.includes('tnt_b'));
      expect(fleet.servers()[0]!.connectionsHighWater).toBeLessThanOrEqual(3);
    } finally {
      await fleet?.stop();
      await db.drop();
    }
  });
});

describe('fleet dispatcher retention and routes', () => {
  it('prunes each database while it is connected, and declares unordered topics in each', async () => {
    const family2 = tenantFamily();
    let fleet: FleetDispatcher | undefined;
    let other: FleetDispatcher | undefined;
    try {
      for (let n = 0; n < 3; n++) await family2.create(n);
      const publisher = new InMemoryPublisher();
      fleet = createFleetDispatcher({
        servers: [inject('adminDatabaseUrl')],
        databases: family2.glob,
        publisher,
        maxConnections: 3,
        pollIntervalMs: 100,
        warmMs: 0,
        unorderedTopics: ['mail.*'],
        retention: { olderThanMs: 1, intervalMs: 1 },
        // Retention runs at the end of every turn, the idle poll's included.
        idlePollMs: 500,
      });
      const pruned = new Map<string, number>();
      fleet.on('fleet:retention:run', ({ target, removed }) =>
        pruned.set(target.name, (pruned.get(target.name) ?? 0) + removed),
      );
      // A fleet of another glob on the same control database is not a member of this one: it
      // must not halve this one's fair share.
      other = createFleetDispatcher({
        servers: [inject('adminDatabaseUrl')],
        databases: `${family2.glob}_none_*`,
        publisher,
      });
      await other.start();
      await fleet.start();
      expect(fleet.servers()[0]!.owned).toBe(3);
      const ids: string[] = [];
      for (let n = 0; n < 3; n++)
        ids.push(
          ...(await commitMessages(family2.url(family2.name(n)), [
            { topic: 'mail.send', aggregateId: 'a', payload: {} },
            { topic: 'order.placed', aggregateId: 'a', payload: {} },
          ])),
        );
      await until(() => ids.every((id) => publisher.published.some((m) => m.id === id)));
      // Rows settled in a turn are pruned by a later one (here the idle poll's, every ~0.5 s).
      await until(() => [0, 1, 2].every((n) => (pruned.get(family2.name(n)) ?? 0) >= 2), 20_000);
      for (let n = 0; n < 3; n++) {
        const c = new pg.Client({ connectionString: family2.url(family2.name(n)) });
        await c.connect();
        const { rows } = await c.query<{ pattern: string }>(
          'SELECT pattern FROM outbox_unordered_topics',
        );
        await c.end();
        expect(rows.map((r) => r.pattern)).toEqual(['mail.%']); // stored as a LIKE pattern
      }
    } finally {
      await fleet?.stop();
      await other?.stop();
      await family2.dropAll();
    }
  });
});
