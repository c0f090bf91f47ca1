import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { OutboxValidationError } from '../core/errors.js';
import { quoteIdentifier, DEFAULT_SCHEMA } from '../core/identifier.js';
import { emptyStats, type DispatcherStats } from '../dispatcher/dispatcher-stats.js';
import { TypedEmitter } from '../dispatcher/events.js';
import type { DispatcherOptions } from '../dispatcher/options.js';
import { resolveDispatcherOptions } from '../dispatcher/options.js';
import type { FleetEventMap } from './events.js';
import { checkGlob } from './glob.js';
import { ServerFleet, type FleetScope } from './server-fleet.js';
import { laneFleetRefusal, type FleetEngine } from './target-engine.js';

export type { FleetEventMap, FleetTargetInfo } from './events.js';

/** Options of {@link createFleetDispatcher}. Durations in milliseconds. */
export interface FleetDispatcherOptions extends Omit<
  DispatcherOptions,
  'executor' | 'store' | 'wakeSource' | 'id'
> {
  /**
   * One URL per server (`postgres://user@host:5432/postgres`). Its database is the control
   * database: the fleet's ownership table lives there (schema `agent_outbox_fleet`), and in
   * schema mode it is the database whose schemas are served.
   */
  servers: readonly string[];
  /** Serve every database whose name matches (`tenant_*`; `*` any run, `?` one character). */
  databases?: string;
  /** Serve every schema of the control database that matches and holds an outbox. */
  schemas?: string;
  /** Connections this process holds per server at most, control connection included. Default 10. */
  maxConnections?: number;
  /** How often the tenants are listed again (new ones served, dropped ones let go). Default 30 000. */
  discoverIntervalMs?: number;
  /**
   * How often the one activity read per server runs (which tenants had writes). Default 200: the
   * latency of a message in an idle tenant is about this plus a connection.
   */
  activityIntervalMs?: number;
  /**
   * A tenant that no counter shows busy is still looked at this often (jittered ±25 %), for what
   * no write announces. Default 60 000.
   */
  idlePollMs?: number;
  /** How long a tenant keeps its connection after it last published. Default 5 000. */
  warmMs?: number;
  /** How long a tenant may drain while others wait for a connection. Default 2 000. */
  turnMs?: number;
  /** Connect timeout per connection. Default 10 000. */
  connectTimeoutMs?: number;
  /** Read each served tenant's status at most this often (for gauges); 0: never. Default 0. */
  statusIntervalMs?: number;
  /** Retention per tenant, run while it is connected, at most every `intervalMs`. */
  retention?: {
    olderThanMs: number;
    archive?: boolean;
    ledgerOlderThanMs?: number | null;
    intervalMs?: number;
  };
  /** Identifies this process among the fleet's members. Default `host:pid:random`. */
  member?: string;
  /**
   * Which engine's messages are dispatched. Default: each tenant's own, as its schema records it
   * (`outbox_engine`, migration 036; read when the tenant is first served): a lane dispatcher
   * for a tenant on lanes, a claim dispatcher for one on claims. `claims` or `lanes`: that
   * engine's tables in every tenant (`fleet:target:other-engine` tells of a tenant that records
   * the other). Fleets of different engines may run on the same tenants; they do not share
   * ownership. With `lanes`, `concurrency` stays 1 and claim-only options are refused; following
   * the records, they fail the tenants on lanes only (`fleet:target:failure`).
   */
  engine?: FleetEngine;
}

/** A dispatcher for many databases (or schemas) with a bounded number of connections. */
export interface FleetDispatcher {
  readonly member: string;
  start(): Promise<void>;
  /** Stops every tenant (batches in flight finish), leaves the fleet, closes every connection. */
  stop(): Promise<void>;
  /** Totals over every tenant served since start. */
  stats(): DispatcherStats;
  /** Per server: connections held now and at most, tenants discovered/owned/connected. */
  servers(): {
    server: string;
    connections: number;
    connectionsHighWater: number;
    discovered: number;
    owned: number;
    connected: number;
    /** Tenants waiting for room in the budget now. */
    queued: number;
    ownedNames: string[];
  }[];
  on: TypedEmitter<FleetEventMap>['on'];
}

/**
 * Creates a fleet dispatcher: the polling dispatcher for every tenant database (or schema) of
 * one or more servers, found by a glob and found again while it runs, with at most
 * `maxConnections` connections per server whatever the number of tenants, shared with other
 * processes running the same fleet (each tenant is served by one process at a time).
 *
 * @example
 * ```ts
 * const fleet = createFleetDispatcher({
 *   servers: ['postgres://outbox@db1:5432/postgres'],
 *   databases: 'tenant_*',
 *   publisher: new HttpPublisher({ url: 'https://hooks.example.com/outbox' }),
 *   maxConnections: 10,
 * });
 * await fleet.start();
 * process.on('SIGTERM', () => void fleet.stop());
 * ```
 */
export function createFleetDispatcher(options: FleetDispatcherOptions): FleetDispatcher {
  if (!Array.isArray(options.servers) || options.servers.length === 0)
    throw new OutboxValidationError('servers', 'give at least one postgres:// URL');
  if ((options.databases === undefined) === (options.schemas === undefined))
    throw new OutboxValidationError(
      'databases',
      'give either databases (a glob of database names) or schemas (a glob of schema names)',
    );
  if (options.databases !== undefined) checkGlob('databases', options.databases);
  if (options.schemas !== undefined) checkGlob('schemas', options.schemas);
  const positive = (name: string, value: number | undefined, fallback: number, min = 1) => {
    const v = value ?? fallback;
    if (!Number.isInteger(v) || v < min)
      throw new OutboxValidationError(name, `must be an integer >= ${min}, got ${String(v)}`);
    return v;
  };
  const engine = options.engine;
  if (engine !== undefined && engine !== 'claims' && engine !== 'lanes')
    throw new OutboxValidationError('engine', `must be claims or lanes, got ${String(engine)}`);
  const refused = engine === 'lanes' ? laneFleetRefusal(options as DispatcherOptions) : undefined;
  if (refused !== undefined)
    throw new OutboxValidationError(refused.slice(0, refused.indexOf(':')), refused);
  const resolved = resolveDispatcherOptions(options as DispatcherOptions);
  const connectionsPerTarget = resolved.concurrency;
  const maxConnections = positive('maxConnections', options.maxConnections, 10, 2);
  if (maxConnections < 1 + connectionsPerTarget)
    throw new OutboxValidationError(
      'maxConnections',
      `must be at least ${1 + connectionsPerTarget}: one control connection plus concurrency (${connectionsPerTarget}) for one tenant at a time`,
    );
  const schema = options.schema ?? DEFAULT_SCHEMA;
  quoteIdentifier(schema);
  const member = options.member ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  const scope: FleetScope =
    options.databases !== undefined
      ? { kind: 'databases', glob: options.databases, schema }
      : { kind: 'schemas', glob: options.schemas! };
  const events = new TypedEmitter<FleetEventMap>();
  const {
    servers: urls,
    databases: _d,
    schemas: _s,
    maxConnections: _m,
    discoverIntervalMs,
    activityIntervalMs,
    idlePollMs,
    warmMs,
    turnMs,
    connectTimeoutMs,
    statusIntervalMs,
    retention,
    member: _member,
    engine: _engine,
    ...dispatcher
  } = options;
  const servers = urls.map(
    (url) =>
      new ServerFleet({
        url,
        scope,
        member,
        maxConnections,
        leaseMs: resolved.leaseMs,
        discoverIntervalMs: positive('discoverIntervalMs', discoverIntervalMs, 30_000),
        activityIntervalMs: positive('activityIntervalMs', activityIntervalMs, 200),
        events,
        target: {
          dispatcher,
          engine,
          connectionsPerTarget,
          pollIntervalMs: resolved.pollIntervalMs,
          warmMs: positive('warmMs', warmMs, 5_000, 0),
          turnMs: positive('turnMs', turnMs, 2_000),
          idlePollMs: positive('idlePollMs', idlePollMs, 60_000),
          connectTimeoutMs: positive('connectTimeoutMs', connectTimeoutMs, 10_000),
          statusIntervalMs: positive('statusIntervalMs', statusIntervalMs, 0, 0),
          ...(retention && {
            retention: {
              olderThanMs: positive('retention.olderThanMs', retention.olderThanMs, 1),
              archive: retention.archive ?? false,
              ledgerOlderThanMs: retention.ledgerOlderThanMs ?? null,
              intervalMs: positive('retention.intervalMs', retention.intervalMs, 3_600_000),
            },
          }),
        },
      }),
  );
  let started = false;
  return {
    member,
    async start() {
      if (started) throw new Error('fleet dispatcher already started; create a new one');
      started = true;
      try {
        await Promise.all(servers.map((s) => s.start()));
      } catch (error) {
        await Promise.all(servers.map((s) => s.stop().catch(() => undefined)));
        throw error;
      }
      events.emit('fleet:start', { member, servers: servers.length });
    },
    async stop() {
      await Promise.all(servers.map((s) => s.stop()));
      events.emit('fleet:stop', { member });
    },
    stats() {
      const total = emptyStats();
      for (const server of servers)
        for (const stats of server.targetStats())
          for (const key of Object.keys(total) as (keyof DispatcherStats)[])
            total[key] += stats[key];
      return total;
    },
    servers() {
      return servers.map((s) => ({
        server: s.server,
        connections: s.connectionsInUse,
        connectionsHighWater: s.connectionsHighWater,
        ...s.counts(),
        ownedNames: s.owned(),
      }));
    },
    on: (event, listener) => events.on(event, listener),
  };
}
