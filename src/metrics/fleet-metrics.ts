import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { OutboxStatus } from '../admin/status.js';
import type { FleetDispatcher } from '../fleet/fleet-dispatcher.js';
import { LATENCY_BUCKETS_SECONDS, type OutboxHealth } from './outbox-metrics.js';
import { OTHER_TOPIC, TopicLabels } from './topic-labels.js';

/** Options of {@link createFleetMetrics}. */
export interface FleetMetricsOptions {
  registry?: Registry;
  /**
   * Databases with a label of their own; the rest are summed under `database="other"`. Counters
   * keep the first ones seen (a series must not change its name mid-life); gauges show the worst
   * ones now (most pending). Default 20.
   */
  maxDatabases?: number;
  /** `/healthz` fails when a server's control connection has failed for this long. Default 60 000. */
  controlStallMs?: number;
}

/** The metrics of a fleet dispatcher, with a bounded `database` label. */
export interface FleetMetrics {
  readonly registry: Registry;
  /** Subscribes to the fleet's events and samples its servers on every scrape. */
  attach(fleet: FleetDispatcher): () => void;
  health(): OutboxHealth;
}

/**
 * Prometheus metrics of `outbox dispatch --databases` (issue 40). Every per-database series
 * carries a `database` label, bounded like the `topic` label (`maxDatabases` named, the rest
 * summed as `other`), so 5,000 tenants cost as many series as 20.
 *
 * | metric | type | labels |
 * | --- | --- | --- |
 * | `outbox_messages_published_total` | counter | database |
 * | `outbox_publish_failures_total` | counter | database, kind |
 * | `outbox_messages_dead_lettered_total` | counter | database |
 * | `outbox_dispatch_latency_seconds` | histogram | database |
 * | `outbox_pending_messages` | gauge | database (worst first, the rest summed) |
 * | `outbox_oldest_pending_age_seconds` | gauge | database (the rest: their oldest) |
 * | `outbox_dead_letter_messages` | gauge | database (the rest summed) |
 * | `outbox_fleet_connections` | gauge | server: held now (control connection included) |
 * | `outbox_fleet_connections_high_water` | gauge | server |
 * | `outbox_fleet_databases` | gauge | server, state (discovered, owned, connected) |
 *
 * The gauges come from each database's latest status read, made while it is served (at most
 * every status interval), so an idle database keeps its last values without a connection.
 */
export function createFleetMetrics(options: FleetMetricsOptions = {}): FleetMetrics {
  const registry = options.registry ?? new Registry();
  const registers = [registry];
  const maxDatabases = options.maxDatabases ?? 20;
  const stallMs = options.controlStallMs ?? 60_000;
  const labels = new TopicLabels(maxDatabases);
  const published = new Counter({
    name: 'outbox_messages_published_total',
    help: 'Messages published, per database.',
    labelNames: ['database'],
    registers,
  });
  const failures = new Counter({
    name: 'outbox_publish_failures_total',
    help: 'Failed publish attempts, per database and kind (retryable, permanent).',
    labelNames: ['database', 'kind'],
    registers,
  });
  const dead = new Counter({
    name: 'outbox_messages_dead_lettered_total',
    help: 'Messages dead-lettered, per database.',
    labelNames: ['database'],
    registers,
  });
  const latency = new Histogram({
    name: 'outbox_dispatch_latency_seconds',
    help: 'Time from a message being written to it being published, per database.',
    labelNames: ['database'],
    buckets: LATENCY_BUCKETS_SECONDS,
    registers,
  });
  const statuses = new Map<string, OutboxStatus>();
  let fleet: FleetDispatcher | undefined;
  const controlFailingSince = new Map<string, number>();

  /** The worst `maxDatabases` by pending messages, the rest summed into `other`. */
  const byDatabase = (pick: (s: OutboxStatus) => number, combine: 'sum' | 'max') => {
    const sorted = [...statuses].sort(([, a], [, b]) => b.backlog - a.backlog);
    const out: [string, number][] = sorted.slice(0, maxDatabases).map(([n, s]) => [n, pick(s)]);
    const rest = sorted.slice(maxDatabases).map(([, s]) => pick(s));
    if (rest.length > 0)
      out.push([
        OTHER_TOPIC,
        combine === 'sum' ? rest.reduce((a, b) => a + b, 0) : Math.max(...rest),
      ]);
    return out;
  };
  const gauge = (
    name: string,
    help: string,
    pick: (s: OutboxStatus) => number,
    combine: 'sum' | 'max',
  ) =>
    new Gauge({
      name,
      help,
      labelNames: ['database'],
      registers,
      collect() {
        this.reset();
        for (const [database, value] of byDatabase(pick, combine)) this.set({ database }, value);
      },
    });
  gauge(
    'outbox_pending_messages',
    'Undispatched, not dead-lettered messages per database (at its latest status read).',
    (s) => s.backlog,
    'sum',
  );
  gauge(
    'outbox_oldest_pending_age_seconds',
    'Age of the oldest pending message per database (at its latest status read).',
    (s) => s.oldestPendingAgeSeconds,
    'max',
  );
  gauge(
    'outbox_dead_letter_messages',
    'Dead-lettered messages per database (at its latest status read).',
    (s) => s.deadLetters,
    'sum',
  );
  new Gauge({
    name: 'outbox_fleet_connections',
    help: 'Connections this process holds on the server now (control connection included).',
    labelNames: ['server'],
    registers,
    collect() {
      this.reset();
      for (const s of fleet?.servers() ?? []) this.set({ server: s.server }, s.connections);
    },
  });
  new Gauge({
    name: 'outbox_fleet_connections_high_water',
    help: 'Most connections held at once on the server since start.',
    labelNames: ['server'],
    registers,
    collect() {
      this.reset();
      for (const s of fleet?.servers() ?? [])
        this.set({ server: s.server }, s.connectionsHighWater);
    },
  });
  new Gauge({
    name: 'outbox_fleet_databases',
    help: 'Tenants on the server: discovered, owned by this process, connected now.',
    labelNames: ['server', 'state'],
    registers,
    collect() {
      this.reset();
      for (const s of fleet?.servers() ?? []) {
        this.set({ server: s.server, state: 'discovered' }, s.discovered);
        this.set({ server: s.server, state: 'owned' }, s.owned);
        this.set({ server: s.server, state: 'connected' }, s.connected);
      }
    },
  });

  return {
    registry,
    attach(target) {
      fleet = target;
      const offs = [
        target.on('fleet:publish:outcome', ({ target: t, message, outcome }) => {
          const database = labels.label(t.name);
          if (outcome.status === 'published') {
            published.inc({ database });
            const created = message.createdAt.getTime();
            if (Number.isFinite(created))
              latency.observe({ database }, Math.max(0, (Date.now() - created) / 1000));
          } else failures.inc({ database, kind: outcome.status });
        }),
        target.on('fleet:dead-letter', ({ target: t }) =>
          dead.inc({ database: labels.label(t.name) }),
        ),
        target.on('fleet:target:status', ({ target: t, status }) => statuses.set(t.name, status)),
        target.on('fleet:target:gone', ({ target: t }) => statuses.delete(t.name)),
        target.on('fleet:control:failure', ({ server }) => {
          if (!controlFailingSince.has(server)) controlFailingSince.set(server, Date.now());
        }),
        target.on('fleet:members', ({ server }) => controlFailingSince.delete(server)),
      ];
      return () => offs.forEach((off) => off());
    },
    health() {
      const now = Date.now();
      const stalled = [...controlFailingSince].find(([, since]) => now - since >= stallMs);
      const backlog = [...statuses.values()].reduce((a, s) => a + s.backlog, 0);
      const dueNow = [...statuses.values()].reduce((a, s) => a + s.dueNow, 0);
      return {
        ok: !stalled,
        reason: stalled
          ? `control connection to ${stalled[0]} failing for ${Math.round((now - stalled[1]) / 1000)} s`
          : 'ok',
        backlog,
        dueNow,
        secondsWithoutProgress: stalled ? Math.round((now - stalled[1]) / 1000) : 0,
        // Per tenant, a read-only database shows as that tenant's failures (fleet:target:failure).
        databaseReadOnly: false,
      };
    },
  };
}
