import type pg from 'pg';
import type { TypedEmitter } from '../dispatcher/events.js';
import { emptyStats, type DispatcherStats } from '../dispatcher/dispatcher-stats.js';
import { createPgPool } from '../store/multi-host-pool.js';
import { endPoolBounded, trackPoolConnections } from '../cli/dispatch/pool-shutdown.js';
import {
  databaseActivitySql,
  databaseCounterSql,
  schemaCounterSql,
  discoverDatabasesSql,
  discoverSchemasSql,
  laneSchemaActivitySql,
  laneSchemaCounterSql,
  recordedSchemaActivitySql,
  recordedSchemaCounterSql,
  schemaActivitySql,
} from '../sql/fleet.js';
import { fromPg } from '../store/from-pg.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import type { FleetEventMap, FleetTargetInfo } from './events.js';
import { FleetTarget, type FleetTargetSettings, type TargetHost } from './fleet-target.js';
import { globMatcher, globToLike } from './glob.js';
import { FleetMembership } from './membership.js';
import { databaseUrlWithName, redactDatabaseUrl } from './url.js';

/**
 * What the fleet reads to see which tenants have work: a database per tenant reads its own
 * statistics whatever the engine; a schema per tenant reads the counters of the engine's tables
 * (both engines' when the fleet follows each schema's record).
 */
const DATABASE_READS = { activity: databaseActivitySql, counter: databaseCounterSql };
const SCHEMA_READS = {
  claims: { activity: schemaActivitySql, counter: schemaCounterSql },
  lanes: { activity: laneSchemaActivitySql, counter: laneSchemaCounterSql },
  recorded: { activity: recordedSchemaActivitySql, counter: recordedSchemaCounterSql },
};

/** What a fleet serves on one server. */
export type FleetScope =
  { kind: 'databases'; glob: string; schema: string } | { kind: 'schemas'; glob: string };

/** Settings of one server's part of a fleet. */
export interface ServerFleetOptions {
  url: string;
  scope: FleetScope;
  member: string;
  /** Connections this process may hold on the server, the control connection included. */
  maxConnections: number;
  leaseMs: number;
  discoverIntervalMs: number;
  activityIntervalMs: number;
  target: FleetTargetSettings;
  events: TypedEmitter<FleetEventMap>;
}

/**
 * One server's share of a fleet process: ONE control connection (discovery, the activity probe,
 * ownership), and a budget of `maxConnections - 1` for the tenants it serves, spent on the tenants
 * that have work right now (fleet-target.ts). A tenant with nothing to do costs a row in the
 * activity probe's answer, not a connection.
 *
 * Scheduling: tenants that need a connection queue in arrival order; a warm tenant (connected,
 * nothing to do) is evicted for one that waits, the least recently used first; a draining tenant
 * whose turn passed `turnMs` while others wait ends its turn after its batch in flight and queues
 * again at the back. So ten busy tenants on a budget of five take turns instead of five starving
 * the others.
 */
export class ServerFleet implements TargetHost {
  readonly events: TypedEmitter<FleetEventMap>;
  readonly server: string;
  readonly #options: ServerFleetOptions;
  readonly #control: pg.Pool;
  readonly #controlOpen: ReadonlySet<pg.PoolClient>;
  readonly #executor: SqlExecutor;
  readonly #membership: FleetMembership;
  readonly #targets = new Map<string, FleetTarget>();
  /** What tenants no longer served here did, summed (a long-lived fleet lets many go). */
  readonly #retired = emptyStats();
  readonly #queue: FleetTarget[] = [];
  readonly #matches: (name: string) => boolean;
  readonly #like: string;
  /** The activity probe's statements: all tenants' counters, and one tenant's. */
  readonly #sql: { activity: string; counter: string };
  #discovered: string[] = [];
  /** Each tenant's write counter as last seen, and when the read that saw it began. */
  #counters = new Map<string, { value: bigint; readAt: number }>();
  #inUse = 0;
  #highWater = 1;
  #running = false;
  #timers: NodeJS.Timeout[] = [];
  #membershipTimer: NodeJS.Timeout | undefined;
  #tick: Promise<void> = Promise.resolve();
  #discoverSoon = false;
  #lastMembers = -1;

  constructor(options: ServerFleetOptions) {
    this.#options = options;
    this.events = options.events;
    this.server = redactDatabaseUrl(options.url);
    this.#matches = globMatcher(options.scope.glob);
    this.#like = globToLike(options.scope.glob);
    this.#control = createPgPool(options.url, {
      max: 1,
      idleTimeoutMillis: 0,
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
      connectionTimeoutMillis: options.target.connectTimeoutMs,
      application_name: 'agent-outbox-fleet-control',
    });
    this.#control.on('error', () => undefined);
    this.#controlOpen = trackPoolConnections(this.#control);
    this.#executor = fromPg(this.#control, { preparedStatements: false });
    const scope = options.scope;
    const engine = options.target.engine ?? 'recorded';
    this.#sql = scope.kind === 'databases' ? DATABASE_READS : SCHEMA_READS[engine];
    this.#membership = new FleetMembership({
      control: this.#executor,
      member: options.member,
      // A fleet of one engine serves every tenant's tables of that engine, and one that follows
      // the records every tenant by its own: while tenants move, fleets of different kinds may
      // serve the same tenants and must not take each other's. The claim engine's scope as before.
      scope:
        (scope.kind === 'databases' ? `db:${scope.glob}:${scope.schema}` : `schema:${scope.glob}`) +
        (engine === 'claims' ? '' : `:${engine}`),
      leaseMs: options.leaseMs,
    });
  }

  /** Most connections held at once on this server since start (control connection included). */
  get connectionsHighWater(): number {
    return this.#highWater;
  }

  /** Connections held now (control connection included). */
  get connectionsInUse(): number {
    return 1 + this.#inUse;
  }

  /** Tenants discovered, served by this process, connected now, waiting for a connection. */
  counts(): { discovered: number; owned: number; connected: number; queued: number } {
    let connected = 0;
    for (const t of this.#targets.values())
      if (t.state === 'draining' || t.state === 'warm' || t.state === 'closing') connected++;
    return {
      discovered: this.#discovered.length,
      owned: this.#targets.size,
      connected,
      queued: this.#queue.length,
    };
  }

  /** Names of the tenants this process serves now. */
  owned(): string[] {
    return [...this.#targets.keys()].sort();
  }

  targetStats(): DispatcherStats[] {
    return [this.#retired, ...[...this.#targets.values()].map((t) => t.stats())];
  }

  #retire(stats: DispatcherStats): void {
    for (const key of Object.keys(this.#retired) as (keyof DispatcherStats)[])
      this.#retired[key] += stats[key];
  }

  async start(): Promise<void> {
    this.#running = true;
    await this.#membership.join();
    await this.#discover();
    // Every tenant's baseline before any is served: its first turn then sees all that the
    // baseline does not (see #probeActivity).
    await this.#probeActivity();
    await this.#reconcile();
    this.#every(this.#options.activityIntervalMs, () => this.#probeActivity());
    this.#every(this.#options.discoverIntervalMs, async () => {
      await this.#discover();
    });
    // Turns are checked on the probe's beat too (see pump()).
  }

  async stop(): Promise<void> {
    this.#running = false;
    for (const timer of this.#timers) clearInterval(timer);
    if (this.#membershipTimer) clearTimeout(this.#membershipTimer);
    await this.#tick.catch(() => undefined);
    await Promise.all([...this.#targets.values()].map((t) => t.stop()));
    for (const t of this.#targets.values()) this.#retire(t.stats());
    this.#targets.clear();
    await this.#membership.leave().catch(() => undefined);
    await endPoolBounded(this.#control, this.#controlOpen);
  }

  // TargetHost ---------------------------------------------------------------------------------

  requestSlot(target: FleetTarget): void {
    this.#queue.push(target);
    this.#pump();
  }

  releaseSlot(): void {
    this.#inUse -= this.#options.target.connectionsPerTarget;
    this.#pump();
  }

  dequeue(target: FleetTarget): void {
    const i = this.#queue.indexOf(target);
    if (i >= 0) this.#queue.splice(i, 1);
  }

  othersWaiting(): boolean {
    return this.#queue.length > 0;
  }

  databaseGone(): void {
    this.#discoverSoon = true;
  }

  // Scheduling ---------------------------------------------------------------------------------

  /** Gives room to queued tenants; makes room by evicting warm ones or ending long turns. */
  #pump(): void {
    const per = this.#options.target.connectionsPerTarget;
    const budget = this.#options.maxConnections - 1;
    while (this.#queue.length > 0) {
      if (this.#inUse + per <= budget) {
        const target = this.#queue.shift()!;
        this.#inUse += per;
        this.#highWater = Math.max(this.#highWater, 1 + this.#inUse);
        target.activate();
        continue;
      }
      let lru: FleetTarget | undefined;
      let longest: FleetTarget | undefined;
      for (const t of this.#targets.values()) {
        if (t.state === 'warm' && (!lru || t.lastUsedAt < lru.lastUsedAt)) lru = t;
        if (t.state === 'draining' && (!longest || t.turnStartedAt < longest.turnStartedAt))
          longest = t;
      }
      if (lru) lru.evict();
      else if (longest && Date.now() - longest.turnStartedAt >= this.#options.target.turnMs)
        longest.endTurn();
      return;
    }
  }

  // Loops --------------------------------------------------------------------------------------

  #every(ms: number, work: () => Promise<void>): void {
    let busy = false;
    const timer = setInterval(() => {
      if (busy || !this.#running) return;
      busy = true;
      work()
        .catch((error: Error) =>
          this.events.emit('fleet:control:failure', { server: this.server, error }),
        )
        .finally(() => (busy = false));
    }, ms);
    timer.unref?.();
    this.#timers.push(timer);
  }

  async #discover(): Promise<void> {
    this.#discoverSoon = false;
    const scope = this.#options.scope;
    const { rows } = await this.#executor.query<{ name: string }>(
      scope.kind === 'databases' ? discoverDatabasesSql : discoverSchemasSql,
      [this.#like],
    );
    const names = rows.map((r) => r.name).filter(this.#matches);
    const before = new Set(this.#discovered);
    const now = new Set(names);
    for (const name of names)
      if (!before.has(name))
        this.events.emit('fleet:target:discovered', { target: this.#info(name) });
    for (const name of before)
      if (!now.has(name)) this.events.emit('fleet:target:gone', { target: this.#info(name) });
    this.#discovered = names;
  }

  /** One ownership round, then the next one scheduled (lease/3, or sooner when a lease frees). */
  async #reconcile(): Promise<void> {
    let nextInMs = this.#options.leaseMs / 3;
    try {
      if (this.#discoverSoon) await this.#discover();
      const result = await this.#membership.reconcile(this.#discovered);
      nextInMs = result.nextInMs;
      for (const name of result.lost) await this.#letGo(name, 'lease lost to another process');
      for (const name of result.toRelease) {
        const reason = this.#discovered.includes(name) ? 'rebalanced' : 'gone';
        void this.#letGo(name, reason).then(() =>
          this.#membership
            .release([name])
            .catch((error: Error) =>
              this.events.emit('fleet:control:failure', { server: this.server, error }),
            ),
        );
      }
      for (const name of result.acquired) this.#serve(name);
      const owned = this.#targets.size;
      this.events.emit('fleet:members', {
        server: this.server,
        members: result.members,
        owned,
        targets: this.#discovered.length,
        changed:
          result.members !== this.#lastMembers ||
          result.acquired.length > 0 ||
          result.toRelease.length > 0 ||
          result.lost.length > 0,
      });
      this.#lastMembers = result.members;
    } catch (error) {
      this.events.emit('fleet:control:failure', { server: this.server, error: error as Error });
      // Past the lease without a renewal, another process may own these tenants now: stop.
      if (Date.now() - this.#membership.renewedAt > this.#options.leaseMs) {
        for (const name of this.#membership.forget())
          await this.#letGo(name, 'control connection lost past the lease');
      }
      nextInMs = Math.min(nextInMs, 1_000);
    }
    if (!this.#running) return;
    this.#membershipTimer = setTimeout(() => {
      this.#tick = this.#reconcile();
    }, nextInMs);
    this.#membershipTimer.unref?.();
  }

  #serve(name: string): void {
    if (this.#targets.has(name)) return;
    const scope = this.#options.scope;
    const url =
      scope.kind === 'databases' ? databaseUrlWithName(this.#options.url, name) : this.#options.url;
    const target = new FleetTarget({
      info: this.#info(name),
      url,
      host: this,
      settings: this.#options.target,
      id: `${this.#options.member}/${name}`,
    });
    this.#targets.set(name, target);
    this.events.emit('fleet:target:owned', { target: target.info });
    target.wake(); // whatever was committed before: served once at once
  }

  async #letGo(name: string, reason: string): Promise<void> {
    const target = this.#targets.get(name);
    if (!target) return;
    await target.stop();
    this.#targets.delete(name);
    this.#counters.delete(name);
    this.#retire(target.stats());
    this.events.emit('fleet:target:released', { target: target.info, reason });
  }

  /** One read of every tenant's write counters; a tenant whose counter moved is woken. */
  async #probeActivity(): Promise<void> {
    const readAt = performance.now();
    const { rows } = await this.#executor.query<{ name: string; changes: string }>(
      this.#sql.activity,
      [this.#like],
    );
    for (const { name, changes } of rows) {
      const before = this.#counters.get(name);
      // A baseline taken after this read began is newer than what this read saw.
      if (before && before.readAt > readAt) continue;
      const value = BigInt(changes);
      this.#counters.set(name, { value, readAt });
      // Moved on (or back: the statistics were reset): something may have been written. A
      // tenant seen for the first time while owned is woken too: a write between its first turn
      // and this read is in this baseline, and only a turn after it can see that write.
      if (before === undefined || value !== before.value) this.#targets.get(name)?.wake();
    }
    this.#pump();
  }

  async rebaseline(target: FleetTarget): Promise<void> {
    const scope = this.#options.scope;
    const name = scope.kind === 'databases' ? target.info.database : target.info.schema;
    const readAt = performance.now();
    const { rows } = await this.#executor.query<{ changes: string | null }>(this.#sql.counter, [
      name,
    ]);
    if (rows[0]?.changes != null)
      this.#counters.set(name, { value: BigInt(rows[0].changes), readAt });
  }

  #info(name: string): FleetTargetInfo {
    const scope = this.#options.scope;
    const database =
      scope.kind === 'databases' ? name : (databaseNameOf(this.#options.url) ?? 'postgres');
    return {
      server: this.server,
      database,
      schema: scope.kind === 'databases' ? scope.schema : name,
      name: scope.kind === 'databases' ? name : `${database}/${name}`,
    };
  }
}

function databaseNameOf(url: string): string | undefined {
  const m = /^[a-z]+:\/\/[^/?#]*\/([^?#]*)/i.exec(url);
  return m?.[1] ? decodeURIComponent(m[1]) : undefined;
}
