import { describe, expect, it } from 'vitest';
import { TypedEmitter } from '../../../src/dispatcher/events.js';
import type { FleetDispatcher, FleetEventMap } from '../../../src/fleet/index.js';
import { createFleetMetrics } from '../../../src/metrics/fleet-metrics.js';
import type { OutboxStatus } from '../../../src/admin/status.js';
import type { OutgoingMessage } from '../../../src/index.js';

/** The part of a fleet the metrics read: its events and its servers' counts. */
function fakeFleet(events: TypedEmitter<FleetEventMap>): FleetDispatcher {
  return {
    member: 'm',
    start: async () => undefined,
    stop: async () => undefined,
    stats: () => {
      throw new Error('not read by the metrics');
    },
    servers: () => [
      {
        server: 'postgres://h/postgres',
        connections: 4,
        connectionsHighWater: 7,
        discovered: 30,
        owned: 15,
        connected: 3,
        queued: 0,
        ownedNames: [],
      },
    ],
    on: (event, listener) => events.on(event, listener),
  };
}

const target = (n: number) => ({
  server: 'postgres://h/postgres',
  database: `tenant_${n}`,
  schema: 'public',
  name: `tenant_${n}`,
});

describe('fleet metrics', () => {
  it('bounds the database label: the first N named, the rest summed as other', async () => {
    const events = new TypedEmitter<FleetEventMap>();
    const metrics = createFleetMetrics({ maxDatabases: 5 });
    metrics.attach(fakeFleet(events));
    for (let n = 0; n < 30; n++)
      events.emit('fleet:publish:outcome', {
        target: target(n),
        message: { id: `m${n}`, createdAt: new Date() } as OutgoingMessage,
        outcome: { status: 'published' },
        durationMs: 1,
      });
    const published = await metrics.registry
      .getSingleMetric('outbox_messages_published_total')!
      .get();
    const byDatabase = Object.fromEntries(
      published.values.map((v) => [v.labels.database, v.value]),
    );
    expect(Object.keys(byDatabase).sort()).toEqual(
      ['other', 'tenant_0', 'tenant_1', 'tenant_2', 'tenant_3', 'tenant_4'].sort(),
    );
    expect(byDatabase.other).toBe(25);
  });

  it('shows the databases with the most pending by name and sums the rest', async () => {
    const events = new TypedEmitter<FleetEventMap>();
    const metrics = createFleetMetrics({ maxDatabases: 2 });
    metrics.attach(fakeFleet(events));
    const status = (backlog: number, age: number, dead: number) =>
      ({
        backlog,
        oldestPendingAgeSeconds: age,
        deadLetters: dead,
        dueNow: backlog,
      }) as OutboxStatus;
    events.emit('fleet:target:status', { target: target(1), status: status(5, 10, 0) });
    events.emit('fleet:target:status', { target: target(2), status: status(50, 3, 1) });
    events.emit('fleet:target:status', { target: target(3), status: status(1, 99, 2) });
    events.emit('fleet:target:status', { target: target(4), status: status(7, 4, 0) });
    const text = await metrics.registry.metrics();
    expect(text).toContain('outbox_pending_messages{database="tenant_2"} 50');
    expect(text).toContain('outbox_pending_messages{database="tenant_4"} 7');
    expect(text).toContain('outbox_pending_messages{database="other"} 6');
    expect(text).toContain('outbox_oldest_pending_age_seconds{database="other"} 99');
    expect(text).toContain('outbox_dead_letter_messages{database="other"} 2');
    expect(text).not.toContain('database="tenant_1"');
    expect(text).toContain('outbox_fleet_connections{server="postgres://h/postgres"} 4');
    expect(text).toContain(
      'outbox_fleet_databases{server="postgres://h/postgres",state="owned"} 15',
    );
    // A dropped database's gauges go with it.
    events.emit('fleet:target:gone', { target: target(2) });
    expect(await metrics.registry.metrics()).not.toContain('database="tenant_2"} 50');
  });
});
