import type { OutgoingMessage, PublishOutcome } from '../publishers/publisher.js';
import type { OutboxStatus } from '../admin/status.js';

/** One tenant of a fleet: a database (or a schema of one) on a server. */
export interface FleetTargetInfo {
  /** The server's URL, password masked. */
  server: string;
  database: string;
  schema: string;
  /** `database` in database mode, `database/schema` in schema mode: the `database` label. */
  name: string;
}

/** Events of a fleet dispatcher, named `fleet:subject:verb`. Listeners must not throw. */
export interface FleetEventMap {
  'fleet:start': [{ member: string; servers: number }];
  'fleet:stop': [{ member: string }];
  /** A tenant was discovered (at start or later) / is gone (dropped, or no longer matches). */
  'fleet:target:discovered': [{ target: FleetTargetInfo }];
  'fleet:target:gone': [{ target: FleetTargetInfo }];
  /** This process serves the tenant from now on / no longer (rebalance, gone, stop, lost lease). */
  'fleet:target:owned': [{ target: FleetTargetInfo }];
  'fleet:target:released': [{ target: FleetTargetInfo; reason: string }];
  /** A tenant got a connection (its turn begins): how often an idle tenant costs one. */
  'fleet:target:connected': [{ target: FleetTargetInfo }];
  /** A tenant was served: one turn of claims until nothing was due (or the turn ran out). */
  'fleet:target:drained': [
    { target: FleetTargetInfo; published: number; durationMs: number; reason: string },
  ];
  /** Serving a tenant failed (unreachable, not migrated, …); it is tried again after `retryInMs`. */
  'fleet:target:failure': [{ target: FleetTargetInfo; error: Error; retryInMs: number }];
  /**
   * A tenant's schema records the other engine (migration 036, `outbox engine`) than the one this
   * fleet dispatches: its writers without an `engine` option write tables this fleet does not
   * read. Once per tenant, when its schema is first checked. A fleet of each engine may run on
   * the same tenants while they move (docs/fleet.md).
   */
  'fleet:target:other-engine': [
    { target: FleetTargetInfo; engine: 'claims' | 'lanes'; recordedEngine: 'claims' | 'lanes' },
  ];
  /** The latest status of a tenant (read at most every status interval, while it is served). */
  'fleet:target:status': [{ target: FleetTargetInfo; status: OutboxStatus }];
  /** The server's control connection (discovery, activity, ownership) failed. */
  'fleet:control:failure': [{ server: string; error: Error }];
  /**
   * After every ownership round on a server (every lease/3): live members, tenants this one owns,
   * tenants discovered; `changed` when members or ownership changed since the last round.
   */
  'fleet:members': [
    { server: string; members: number; owned: number; targets: number; changed: boolean },
  ];
  /** A tenant's retention run. */
  'fleet:retention:run': [{ target: FleetTargetInfo; removed: number; durationMs: number }];
  // The dispatcher events of every tenant, with the tenant.
  'fleet:publish:outcome': [
    {
      target: FleetTargetInfo;
      message: OutgoingMessage;
      outcome: PublishOutcome;
      durationMs: number;
    },
  ];
  'fleet:dead-letter': [{ target: FleetTargetInfo; message: OutgoingMessage; error: string }];
  'fleet:claim:failure': [{ target: FleetTargetInfo; error: Error }];
  'fleet:settle:failure': [{ target: FleetTargetInfo; error: Error; messages: number }];
  'fleet:route:paused': [{ target: FleetTargetInfo; route: string }];
  'fleet:route:resumed': [{ target: FleetTargetInfo; route: string }];
}
