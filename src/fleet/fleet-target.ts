import { readDatabaseEngine } from '../admin/database-engine.js';
import type pg from 'pg';
import { quoteIdentifier } from '../core/identifier.js';
import { OutboxValidationError } from '../core/errors.js';
import type { Dispatcher } from '../dispatcher/dispatcher.js';
import { emptyStats, type DispatcherStats } from '../dispatcher/dispatcher-stats.js';
import type { DispatcherOptions } from '../dispatcher/options.js';
import type { TypedEmitter } from '../dispatcher/events.js';
import { assertSchemaCurrent } from '../migrations/migrate.js';
import { createRetentionJob, poolSessions } from '../retention/retention-job.js';
import { forceStatsFlushSql } from '../sql/fleet.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { fromPg } from '../store/from-pg.js';
import { createPgPool } from '../store/multi-host-pool.js';
import { endPoolBounded, trackPoolConnections } from '../cli/dispatch/pool-shutdown.js';
import type { FleetEventMap, FleetTargetInfo } from './events.js';
import {
  createTargetEngine,
  laneFleetRefusal,
  type FleetEngine,
  type TargetEngine,
  type TenantDispatcherOptions,
} from './target-engine.js';

/**
 * States of one tenant in a fleet process (it holds a connection only in the middle three):
 *
 * - `idle`     — no connection. Woken by the activity probe (a write in its database), by its
 *                next-due timer (a message backing off, a dead dispatcher's lease running out),
 *                by the idle poll (every `idlePollMs`, for what no counter shows), or on being
 *                owned. → queued.
 * - `queued`   — waiting for room in the server's connection budget. → draining.
 * - `draining` — has its connection(s): claims until nothing is due, or until its turn is over
 *                while others wait (turnMs). A wake meanwhile drains once more. → warm, or
 *                closing when others wait / the turn ended / it failed.
 * - `warm`     — drained, connection kept for `warmMs` after its last published message: a busy
 *                tenant's next message needs no new connection, and its own statistics, which lag
 *                up to 10 s, are covered by polling every `pollIntervalMs` meanwhile. Evicted at
 *                once when another tenant needs the room. → draining, or closing.
 * - `closing`  — reads when the next message is due, closes its connection, gives the room back.
 *                → idle (or queued again if its turn ran out with work left or a wake came).
 * - `stopped`  — released (rebalance, gone, process stopping). Final.
 */
export type FleetTargetState = 'idle' | 'queued' | 'draining' | 'warm' | 'closing' | 'stopped';

/** What a tenant needs from its server's scheduler (server-fleet.ts). */
export interface TargetHost {
  /** Queue for room in the budget; the host calls {@link FleetTarget.activate} when there is. */
  requestSlot(target: FleetTarget): void;
  /** Room given back (connections closed). */
  releaseSlot(target: FleetTarget): void;
  /** Drops a queued target from the queue (on stop). */
  dequeue(target: FleetTarget): void;
  othersWaiting(): boolean;
  /** A connection error that says the database is gone: rediscover now. */
  databaseGone(target: FleetTarget): void;
  /** Reads the tenant's write counter now and takes it as the baseline of the activity probe. */
  rebaseline(target: FleetTarget): Promise<void>;
  readonly events: TypedEmitter<FleetEventMap>;
}

/** Timings and per-tenant settings shared by every tenant of a fleet. */
export interface FleetTargetSettings {
  dispatcher: TenantDispatcherOptions;
  /**
   * Which engine's tables are dispatched (target-engine.ts); undefined: each tenant's record
   * (`outbox_engine`), read when its schema is checked.
   */
  engine: FleetEngine | undefined;
  /** Connections one tenant holds while served (its pool's max). */
  connectionsPerTarget: number;
  pollIntervalMs: number;
  warmMs: number;
  turnMs: number;
  idlePollMs: number;
  connectTimeoutMs: number;
  /** 0: no status reads. */
  statusIntervalMs: number;
  retention?: {
    olderThanMs: number;
    archive: boolean;
    ledgerOlderThanMs: number | null;
    intervalMs: number;
  };
}

const RETRY_MIN_MS = 1_000;
const RETRY_MAX_MS = 60_000;

/** One tenant of a fleet process. See {@link FleetTargetState}. */
export class FleetTarget {
  readonly info: FleetTargetInfo;
  readonly #url: string;
  readonly #host: TargetHost;
  readonly #settings: FleetTargetSettings;
  /** Made at once for a fleet of one engine, at the schema check when it follows the record. */
  #engine: TargetEngine | undefined;
  readonly #makeEngine: (engine: FleetEngine) => TargetEngine;
  #state: FleetTargetState = 'idle';
  #pool: pg.Pool | undefined;
  #open: ReadonlySet<pg.PoolClient> = new Set();
  #timer: NodeJS.Timeout | undefined;
  #wakePending = false;
  #turnOver = false;
  #stopping = false;
  #activation: Promise<void> = Promise.resolve();
  #schemaChecked = false;
  #failures = 0;
  #warmUntil = 0;
  #lastUsedAt = 0;
  #turnStartedAt = 0;
  #lastStatusAt = 0;
  #lastRetentionAt = 0;
  /** False once the server turned out to have no `pg_stat_force_next_flush()` (before 15). */
  #canFlushStats = true;

  constructor(args: {
    info: FleetTargetInfo;
    url: string;
    host: TargetHost;
    settings: FleetTargetSettings;
    id: string;
  }) {
    this.info = args.info;
    this.#url = args.url;
    this.#host = args.host;
    this.#settings = args.settings;
    quoteIdentifier(args.info.schema);
    // The dispatcher lives as long as the tenant is owned (its one-time preparation — unordered
    // topics, rate limits — runs once); its executor reaches whichever pool is open now.
    const executor: SqlExecutor = {
      query: (text, values, options) => {
        if (!this.#pool) throw new Error(`${this.info.name}: not connected (fleet bug)`);
        return fromPg(this.#pool).query(text, values, options);
      },
    };
    this.#makeEngine = (engine) => {
      const made = createTargetEngine({
        engine,
        options: args.settings.dispatcher,
        schema: args.info.schema,
        executor,
        id: args.id,
        turnOver: () => this.#turnOver,
      });
      this.#forwardEvents(made.dispatcher);
      return made;
    };
    if (args.settings.engine !== undefined) this.#engine = this.#makeEngine(args.settings.engine);
  }

  get state(): FleetTargetState {
    return this.#state;
  }

  /** When it last held a connection (for evicting the least recently used warm tenant). */
  get lastUsedAt(): number {
    return this.#lastUsedAt;
  }

  /** When its current turn began (draining only). */
  get turnStartedAt(): number {
    return this.#turnStartedAt;
  }

  stats(): DispatcherStats {
    return this.#engine?.dispatcher.stats() ?? emptyStats();
  }

  /** Something may be due: serve the tenant soon. */
  wake(): void {
    switch (this.#state) {
      case 'idle':
        this.#clearTimer();
        this.#state = 'queued';
        this.#host.requestSlot(this);
        return;
      case 'warm':
        this.#clearTimer();
        this.#activation = this.#drainTurns();
        return;
      case 'draining':
      case 'closing':
        this.#wakePending = true;
        return;
      default:
        return;
    }
  }

  /** The host gave it room in the budget: connect and drain. */
  activate(): void {
    this.#activation = this.#connectAndDrain();
  }

  /** Others wait and this turn is long enough: end after the batch in flight. */
  endTurn(): void {
    if (this.#state === 'draining') this.#turnOver = true;
  }

  /** A warm tenant gives its connection to one that waits. */
  evict(): void {
    if (this.#state !== 'warm') return;
    this.#clearTimer();
    this.#activation = this.#close();
  }

  /** Stops serving it: the batch in flight is finished and settled, the connection closed. */
  async stop(): Promise<void> {
    if (this.#state === 'stopped') return;
    this.#stopping = true;
    this.#turnOver = true;
    this.#clearTimer();
    if (this.#state === 'queued') this.#host.dequeue(this);
    if (this.#state === 'idle' || this.#state === 'queued') {
      this.#state = 'stopped';
      return;
    }
    if (this.#state === 'warm') this.#activation = this.#close();
    await this.#activation.catch(() => undefined);
    this.#state = 'stopped';
  }

  async #connectAndDrain(): Promise<void> {
    this.#state = 'draining';
    this.#lastUsedAt = Date.now();
    try {
      if (!this.#pool) {
        this.#openPool();
        this.#host.events.emit('fleet:target:connected', { target: this.info });
      }
      if (!this.#schemaChecked) {
        await assertSchemaCurrent(this.#executor(), this.info.schema);
        const recorded = await readDatabaseEngine(this.#executor(), { schema: this.info.schema });
        const engine = this.#settings.engine;
        if (engine === undefined) {
          // Following the record: the options the lanes engine does not take fail this tenant
          // (an error event, retried with backoff), not the fleet's other tenants.
          const refused =
            recorded === 'lanes'
              ? laneFleetRefusal(this.#settings.dispatcher as DispatcherOptions)
              : undefined;
          if (refused !== undefined)
            throw new OutboxValidationError(
              refused.slice(0, refused.indexOf(':')),
              `schema "${this.info.schema}" records the lanes engine, which does not take ${refused}`,
            );
          // Checked again after a failure: a record changed meanwhile is followed from then on.
          if (this.#engine?.name !== recorded) this.#engine = this.#makeEngine(recorded);
        } else if (recorded !== engine)
          this.#host.events.emit('fleet:target:other-engine', {
            target: this.info,
            engine,
            recordedEngine: recorded,
          });
        await this.#engine!.prepare(this.#executor());
        this.#schemaChecked = true;
      }
    } catch (error) {
      await this.#failed(error as Error);
      return;
    }
    await this.#drainTurns();
  }

  async #drainTurns(): Promise<void> {
    this.#state = 'draining';
    this.#turnOver = this.#stopping;
    this.#turnStartedAt = Date.now();
    let published = 0;
    try {
      do {
        this.#wakePending = false;
        const started = Date.now();
        const result = await this.#engine!.dispatcher.drain();
        published += result.published;
        // Claim once more after a new baseline: whatever was committed before it is seen now.
        // A turn of the lanes engine writes even when it found nothing (its lanes taken and
        // given back): rebaselined too, else those writes wake the tenant again and again; the
        // read of the next due time, after the baseline, sees what that drain could not.
        if (
          (result.claimed > 0 || this.#engine!.writesEveryTurn) &&
          !this.#wakePending &&
          !this.#turnOver &&
          (await this.#rebaseline()) &&
          result.claimed > 0
        )
          this.#wakePending = true;
        this.#host.events.emit('fleet:target:drained', {
          target: this.info,
          published: result.published,
          durationMs: Date.now() - started,
          reason: this.#turnOver ? 'turn over' : 'nothing due',
        });
      } while (this.#wakePending && !this.#turnOver);
      this.#failures = 0;
      this.#lastUsedAt = Date.now();
      if (published > 0) {
        this.#warmUntil = Date.now() + this.#settings.warmMs;
      }
      await this.#housekeeping();
    } catch (error) {
      await this.#failed(error as Error);
      return;
    }
    if (this.#stopping) {
      await this.#close();
      return;
    }
    if (this.#turnOver) {
      // The turn ran out with work left: give the room to who waits, queue again at the back.
      this.#wakePending = true;
      await this.#close();
      return;
    }
    if (this.#host.othersWaiting() || Date.now() >= this.#warmUntil) {
      await this.#close();
      return;
    }
    this.#state = 'warm';
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (this.#state !== 'warm') return;
      if (Date.now() >= this.#warmUntil) this.evict();
      else this.wake();
    }, this.#settings.pollIntervalMs);
    this.#timer.unref?.();
  }

  /**
   * Our own leases and settles move the tenant's write counter too, and would wake it once more
   * after every turn. Flush this connection's statistics, then take the counter as the baseline.
   * A message committed before that read is caught by the claim that follows (the caller's); one
   * committed after it moves the counter past the baseline. False when it could not be done.
   */
  async #rebaseline(): Promise<boolean> {
    if (!this.#canFlushStats || this.#settings.connectionsPerTarget > 1) return false;
    try {
      await this.#executor().query(forceStatsFlushSql);
    } catch (error) {
      if ((error as { code?: string }).code === '42883') this.#canFlushStats = false;
      return false;
    }
    try {
      await this.#host.rebaseline(this);
      return true;
    } catch {
      return false;
    }
  }

  /** Status for the gauges and retention, each at most once per its interval, while connected. */
  async #housekeeping(): Promise<void> {
    const now = Date.now();
    const { statusIntervalMs, retention } = this.#settings;
    if (statusIntervalMs > 0 && now - this.#lastStatusAt >= statusIntervalMs) {
      this.#lastStatusAt = now;
      const status = await this.#engine!.readStatus(this.#executor());
      this.#host.events.emit('fleet:target:status', { target: this.info, status });
    }
    // Every turn counts, the idle poll's too: rows become old enough long after their turn.
    if (retention && now - this.#lastRetentionAt >= retention.intervalMs) {
      this.#lastRetentionAt = now;
      const job = createRetentionJob({
        connect: poolSessions(this.#pool!),
        schema: this.info.schema,
        olderThanMs: retention.olderThanMs,
        archive: retention.archive,
        ledgerOlderThanMs: retention.ledgerOlderThanMs,
        intervalMs: retention.intervalMs,
      });
      const result = await job.runOnce();
      if (result.ran) {
        this.#host.events.emit('fleet:retention:run', {
          target: this.info,
          removed: result.outbox.removed,
          durationMs: Date.now() - now,
        });
      }
    }
  }

  async #failed(error: Error): Promise<void> {
    this.#failures++;
    const retryInMs = Math.min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** Math.min(this.#failures - 1, 8));
    this.#schemaChecked = false;
    this.#host.events.emit('fleet:target:failure', { target: this.info, error, retryInMs });
    if ((error as { code?: string }).code === '3D000') this.#host.databaseGone(this);
    await this.#close(retryInMs);
  }

  /** Reads when the next message is due, closes the pool, gives the room back, sleeps. */
  async #close(retryInMs?: number): Promise<void> {
    this.#state = 'closing';
    let nextInMs: number | null = retryInMs ?? null;
    const pool = this.#pool;
    if (pool && retryInMs === undefined && !this.#stopping && this.#engine) {
      try {
        const { rows } = await this.#executor().query<{ inMs: number | null }>(
          this.#engine.nextDueSql,
        );
        nextInMs = rows[0]?.inMs ?? null;
      } catch {
        nextInMs = RETRY_MIN_MS; // unknown: look again soon rather than after the idle poll
      }
    }
    this.#pool = undefined;
    if (pool) await endPoolBounded(pool, this.#open);
    this.#host.releaseSlot(this);
    if (this.#stopping) {
      this.#state = 'stopped';
      return;
    }
    this.#state = 'idle';
    if (this.#wakePending) {
      this.#wakePending = false;
      this.wake();
      return;
    }
    // The idle poll is jittered so that tenants found at one start do not all wake together.
    const idleMs = this.#settings.idlePollMs * (0.75 + Math.random() * 0.5);
    const waitMs = Math.max(0, Math.min(nextInMs ?? idleMs, idleMs));
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.wake();
    }, waitMs);
    this.#timer.unref?.();
  }

  #openPool(): void {
    // createPgPool: a multi-host URL (libpq's, for an HA pair) finds the writable host.
    const pool = createPgPool(this.#url, {
      max: this.#settings.connectionsPerTarget,
      // Closed on purpose when the tenant goes idle; never behind our back.
      idleTimeoutMillis: 0,
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
      connectionTimeoutMillis: this.#settings.connectTimeoutMs,
      application_name: 'agent-outbox-fleet',
    });
    pool.on('error', () => undefined); // an idle connection lost: the pool replaces it
    this.#open = trackPoolConnections(pool);
    this.#pool = pool;
  }

  #executor(): SqlExecutor {
    if (!this.#pool) throw new Error(`${this.info.name}: not connected (fleet bug)`);
    return fromPg(this.#pool);
  }

  #clearTimer(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #forwardEvents(dispatcher: Dispatcher): void {
    const { events } = this.#host;
    const target = this.info;
    dispatcher.on('dispatcher:publish:outcome', (e) =>
      events.emit('fleet:publish:outcome', { target, ...e }),
    );
    dispatcher.on('dispatcher:dead-letter', (e) =>
      events.emit('fleet:dead-letter', { target, ...e }),
    );
    dispatcher.on('dispatcher:claim:failure', ({ error }) =>
      events.emit('fleet:claim:failure', { target, error }),
    );
    dispatcher.on('dispatcher:settle:failure', ({ error, messages }) =>
      events.emit('fleet:settle:failure', { target, error, messages }),
    );
    dispatcher.on('dispatcher:route:paused', ({ route }) =>
      events.emit('fleet:route:paused', { target, route }),
    );
    dispatcher.on('dispatcher:route:resumed', ({ route }) =>
      events.emit('fleet:route:resumed', { target, route }),
    );
  }
}
