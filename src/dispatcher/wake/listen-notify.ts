import { toError } from '../../core/errors.js';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { OutboxValidationError } from '../../core/errors.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../../core/identifier.js';
import {
  deleteWaiterSql,
  heartbeatSql,
  listenSql,
  notifyChannel,
  upsertWaiterSql,
} from '../../sql/notify.js';
import { TypedEmitter } from '../events.js';
import type { WakeSource } from '../wake-source.js';
import type { ReconnectDelayOptions } from './reconnect-delay.js';
import { positiveMs, Reconnecting } from './reconnecting.js';

/**
 * The subset of a `pg` `Client` the wake source calls, typed structurally so the core does not
 * import `pg`. A dedicated connection: LISTEN is per session, so it cannot come from a pool.
 */
export interface ListenClient {
  query(text: string, values?: unknown[]): Promise<unknown>;
  on(
    event: 'notification',
    listener: (message: { channel: string; payload?: string }) => void,
  ): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  end(): Promise<void>;
  /** pg's socket, destroyed when a heartbeat times out (`end()` can hang on a dead peer). */
  connection?: { stream?: { destroy(): void } };
}

/** Options of {@link createListenNotifyWakeSource}. Durations in milliseconds. */
export interface ListenNotifyOptions {
  /**
   * Opens a NEW connected client each time it is called (first connect and every reconnect).
   * Turn on TCP keepalive so a silently dropped connection is noticed by the OS too.
   *
   * @example
   * ```ts
   * connect: async () => {
   *   const client = new pg.Client({ connectionString, keepAlive: true, application_name: 'outbox-listen' });
   *   await client.connect();
   *   return client;
   * }
   * ```
   */
  connect: () => Promise<ListenClient>;
  /** Schema of the outbox tables; also names the channel `<schema>_outbox`. Default `public`. */
  schema?: string;
  /**
   * How often the connection proves it is alive with a query (and refreshes the waiter row's
   * expiry while armed). Default 5 000.
   */
  heartbeatMs?: number;
  /**
   * A heartbeat (or LISTEN, or a waiter-row write) not answered within this is a dead
   * connection: it is dropped and the source reconnects. Default 5 000.
   */
  heartbeatTimeoutMs?: number;
  /**
   * A `connect()` that has not resolved within this counts as failed (its client, if it
   * connects later, is dropped) and is retried with `reconnectDelay`. Without it, a connect
   * into a network partition — no answer, no error — can wait for good, and the source never
   * listens again. Give your client a connect timeout too (`connectionTimeoutMillis`).
   * Default 10 000.
   */
  connectTimeoutMs?: number;
  /**
   * Lifetime of the waiter row without a heartbeat. After a crash, producers keep notifying
   * (uselessly) for at most this long. Must exceed `heartbeatMs`. Default 20 000.
   */
  waiterTtlMs?: number;
  /** Reconnect backoff. Default `{ minMs: 100, maxMs: 10 000 }`. */
  reconnectDelay?: Partial<ReconnectDelayOptions>;
  /** Identifies this waiter row. Default `host:pid:random`. */
  id?: string;
}

/** Events of the wake source, named `scope:subject:verb`. Listeners must not throw. */
export interface ListenNotifyEventMap {
  /** LISTEN is active (first time or after a reconnect); a catch-up wake-up follows. */
  'listen:connection:open': [{ reconnect: boolean }];
  /** The connection died, failed to open, or missed a heartbeat; a reconnect is scheduled. */
  'listen:connection:lost': [{ error: Error; retryInMs: number }];
  'listen:notification:receive': [];
}

class PgListenNotifyWakeSource implements ListenNotifyWakeSource {
  readonly id: string;
  readonly #connect: () => Promise<ListenClient>;
  readonly #channel: string;
  readonly #sql: { listen: string; upsert: string; remove: string; heartbeat: string };
  readonly #heartbeatMs: number;
  readonly #heartbeatTimeoutMs: number;
  readonly #connectTimeoutMs: number;
  readonly #waiterTtlMs: number;
  readonly #events = new TypedEmitter<ListenNotifyEventMap>();
  /**
   * The states of reconnecting.ts: `opening` is connecting a client and running LISTEN (and
   * re-arming if armed); `open` is listening (notifications arrive, heartbeats run).
   */
  readonly #life: Reconnecting;
  #client: ListenClient | undefined;
  #wake: (hint?: string) => void = () => undefined;
  /** The dispatcher said idle() and not busy() since: the waiter row should exist. */
  #armed = false;
  #heartbeatTimer: NodeJS.Timeout | undefined;

  constructor(options: ListenNotifyOptions) {
    if (typeof options?.connect !== 'function')
      throw new OutboxValidationError('connect', 'must be a function returning a connected client');
    const schemaName = options.schema ?? DEFAULT_SCHEMA;
    const schema = quoteIdentifier(schemaName);
    this.#connect = options.connect;
    this.#channel = notifyChannel(schemaName);
    this.#sql = {
      listen: listenSql(schemaName),
      upsert: upsertWaiterSql(schema),
      remove: deleteWaiterSql(schema),
      heartbeat: heartbeatSql(schema),
    };
    this.#heartbeatMs = positiveMs('heartbeatMs', options.heartbeatMs, 5_000);
    this.#heartbeatTimeoutMs = positiveMs('heartbeatTimeoutMs', options.heartbeatTimeoutMs, 5_000);
    this.#connectTimeoutMs = positiveMs('connectTimeoutMs', options.connectTimeoutMs, 10_000);
    this.#waiterTtlMs = positiveMs('waiterTtlMs', options.waiterTtlMs, 20_000);
    if (this.#waiterTtlMs <= this.#heartbeatMs)
      throw new OutboxValidationError('waiterTtlMs', 'must be greater than heartbeatMs');
    this.#life = new Reconnecting(() => void this.#open(), options.reconnectDelay);
    this.id = options.id ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  }

  on: TypedEmitter<ListenNotifyEventMap>['on'] = (event, listener) =>
    this.#events.on(event, listener);

  /** True while LISTEN is active on a live connection. */
  get listening(): boolean {
    return this.#life.state === 'open';
  }

  /** Resolves after the first connection attempt; a failure schedules a reconnect, never throws. */
  async start(wake: (hint?: string) => void): Promise<void> {
    if (this.#life.state !== 'created') throw new Error(`wake source is ${this.#life.state}`);
    this.#wake = wake;
    await this.#open();
  }

  async idle(): Promise<void> {
    this.#armed = true;
    // Not connected: the reconnect re-arms and wakes (catch-up), so nothing is lost by waiting.
    if (this.#life.state === 'open') await this.#bounded(this.#sql.upsert, this.#upsertArgs());
  }

  async busy(): Promise<void> {
    this.#armed = false;
    if (this.#life.state === 'open') await this.#bounded(this.#sql.remove, [this.id]);
  }

  /**
   * A statement on the listening connection, given up after `heartbeatTimeoutMs`: the dispatcher
   * awaits idle(), and a connection that stopped answering must not hold its loop.
   */
  async #bounded(sql: string, args: unknown[]): Promise<void> {
    const client = this.#client;
    if (!client) return;
    try {
      await withTimeout(client.query(sql, args), this.#heartbeatTimeoutMs);
    } catch (error) {
      this.#lost(client, toError(error));
      throw error;
    }
  }

  async stop(): Promise<void> {
    const client = this.#life.state === 'open' ? this.#client : undefined;
    this.#life.stop();
    this.#armed = false;
    clearInterval(this.#heartbeatTimer);
    this.#client = undefined;
    if (!client) return;
    // Remove our row so producers stop notifying now, not when it expires.
    await withTimeout(client.query(this.#sql.remove, [this.id]), this.#heartbeatTimeoutMs).catch(
      () => undefined,
    );
    await withTimeout(client.end(), this.#heartbeatTimeoutMs).catch(() => destroy(client));
  }

  #upsertArgs(): unknown[] {
    return [this.id, this.#waiterTtlMs];
  }

  async #open(): Promise<void> {
    this.#life.opening();
    let client: ListenClient | undefined;
    try {
      const connecting = this.#connect();
      client = await withTimeout(connecting, this.#connectTimeoutMs).catch((error: unknown) => {
        // It may still connect: drop it then.
        connecting.then(destroy, () => undefined);
        throw error;
      });
      const opened = client;
      opened.on('error', (error) => this.#lost(opened, error));
      opened.on('end', () => this.#lost(opened, new Error('LISTEN connection ended')));
      opened.on('notification', ({ channel, payload }) => {
        if (channel !== this.#channel || this.#client !== opened) return;
        this.#events.emit('listen:notification:receive');
        // The payload: what the lanes writer says was written (sql/lanes.ts), '' otherwise.
        this.#wake(payload || undefined);
      });
      await withTimeout(opened.query(this.#sql.listen), this.#heartbeatTimeoutMs);
      if (this.#armed)
        await withTimeout(
          opened.query(this.#sql.upsert, this.#upsertArgs()),
          this.#heartbeatTimeoutMs,
        );
      if (this.#life.state === 'stopped') {
        await opened.end().catch(() => undefined);
        return;
      }
      this.#client = opened;
      const reconnect = this.#life.opened();
      this.#heartbeatTimer = setInterval(() => void this.#heartbeat(opened), this.#heartbeatMs);
      this.#heartbeatTimer.unref();
      this.#events.emit('listen:connection:open', { reconnect });
      // Catch-up: notifications sent while we were not listening are gone; claim once to find
      // anything committed meanwhile.
      this.#wake();
    } catch (error) {
      if (client) destroy(client);
      this.#scheduleReconnect(toError(error));
    }
  }

  async #heartbeat(client: ListenClient): Promise<void> {
    if (this.#client !== client || this.#life.state !== 'open') return;
    const sql = this.#armed ? this.#sql.upsert : this.#sql.heartbeat;
    const args = this.#armed ? this.#upsertArgs() : [];
    try {
      await withTimeout(client.query(sql, args), this.#heartbeatTimeoutMs);
    } catch (error) {
      this.#lost(client, toError(error));
    }
  }

  /** Idempotent per client: 'error', 'end' and a failed heartbeat may all report one loss. */
  #lost(client: ListenClient, error: Error): void {
    if (this.#client !== client || this.#life.state !== 'open') return;
    this.#client = undefined;
    clearInterval(this.#heartbeatTimer);
    destroy(client);
    this.#scheduleReconnect(error);
  }

  /** Nothing once stopped. */
  #scheduleReconnect(error: Error): void {
    const retryInMs = this.#life.failed();
    if (retryInMs !== undefined) this.#events.emit('listen:connection:lost', { error, retryInMs });
  }
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Drops a client without waiting: `end()` waits for the server, which may be unreachable. */
function destroy(client: ListenClient): void {
  client.end().catch(() => undefined);
  client.connection?.stream?.destroy();
}

/** A {@link WakeSource} on LISTEN/NOTIFY, with its connection events. */
export interface ListenNotifyWakeSource extends WakeSource {
  /** Waiter row id. */
  readonly id: string;
  /** True while LISTEN is active on a live connection. */
  readonly listening: boolean;
  on: TypedEmitter<ListenNotifyEventMap>['on'];
}

/**
 * Wakes an idle dispatcher when a message is committed, through LISTEN/NOTIFY — without making
 * producers pay for NOTIFY while dispatchers are busy (migration 005):
 *
 * - `idle()` writes this source's row in `outbox_waiters`: from then on, a committing enqueue
 *   transaction sends ONE notification on `<schema>_outbox`; `busy()` deletes the row and
 *   producers stop notifying.
 * - A dedicated connection LISTENs. A heartbeat query (which also refreshes the row's expiry)
 *   detects a dead connection; the source reconnects with backoff and calls `wake()` after every
 *   (re)connect, so whatever was committed while it was deaf is claimed at once.
 * - A hint only: the dispatcher keeps polling (`pollIntervalMs` is the fallback).
 *
 * @example
 * ```ts
 * const dispatcher = createDispatcher({
 *   executor: fromPg(pool),
 *   publisher,
 *   pollIntervalMs: 5_000, // fallback only
 *   wakeSource: createListenNotifyWakeSource({
 *     connect: async () => {
 *       const client = new pg.Client({ connectionString, keepAlive: true });
 *       await client.connect();
 *       return client;
 *     },
 *   }),
 * });
 * ```
 */
export function createListenNotifyWakeSource(options: ListenNotifyOptions): ListenNotifyWakeSource {
  return new PgListenNotifyWakeSource(options);
}
