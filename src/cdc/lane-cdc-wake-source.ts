import { OutboxValidationError, toError } from '../core/errors.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import { TypedEmitter } from '../dispatcher/events.js';
import type { WakeSource } from '../dispatcher/wake-source.js';
import type { ReconnectDelayOptions } from '../dispatcher/wake/reconnect-delay.js';
import { positiveMs, Reconnecting } from '../dispatcher/wake/reconnecting.js';
import { advanceSlotSql, createLanePublicationSql, serverVersionNumSql } from '../sql/cdc.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { parseLsn, type Lsn } from './lsn.js';
import type { PgConnectionConfig } from './options.js';
import { currentDatabase, defaultSlotName, ensurePublication, ensureSlot } from './slot.js';
import { openWalStream, type WalStream } from './wal-stream.js';

/** Options of {@link createLaneCdcWakeSource}. */
export interface LaneCdcWakeSourceOptions {
  /** Where the slot and the publication are looked up or created: `fromPg(pool)`. */
  executor: SqlExecutor;
  /**
   * Connection for the replication stream (a `pg` ClientConfig; `replication: 'database'` is
   * added). The role needs the REPLICATION attribute; the server `wal_level = logical`.
   */
  replicationConnection: PgConnectionConfig;
  /** Schema of the outbox. Default `public`. */
  schema?: string;
  /**
   * Default `agent_outbox_lanes_<database>_<schema>`. A slot serves one stream at a time: give
   * each dispatcher process its own (a second process on the same slot keeps retrying, and
   * polls meanwhile).
   */
  slotName?: string;
  /**
   * Default `agent_outbox_lanes_<schema>`. Created when missing: INSERTs of the lane messages,
   * from PostgreSQL 15 only the columns a wake-up reads (`id`, `lane`, `available_at`; the
   * payload is not streamed). One created by an earlier version streams whole rows: drop it
   * (`DROP PUBLICATION`) while no dispatcher streams, and the next start creates the smaller one.
   */
  publicationName?: string;
  /**
   * The stream counts as lost when nothing arrived on it for this long (a connection a network
   * partition froze closes nothing); the source pings the server every `confirmIntervalMs`.
   * Default 10 000.
   */
  streamTimeoutMs?: number;
  /** Confirm the stream's position (and ask for a keepalive) this often. Default 1 000. */
  confirmIntervalMs?: number;
  reconnectDelay?: Partial<ReconnectDelayOptions>;
}

/** Events of the source, named `scope:subject:verb`. Listeners must not throw. */
export interface LaneCdcWakeSourceEventMap {
  /** Streaming (first time or after a loss); a catch-up wake-up follows. */
  'cdc:stream:start': [{ slot: string; reconnect: boolean }];
  /** The stream failed to start or was lost; a restart is scheduled. */
  'cdc:stream:lost': [{ error: Error; retryInMs: number }];
}

/** A wake source that follows the lanes' inserts over logical replication. */
export interface LaneCdcWakeSource extends WakeSource {
  readonly slot: string | undefined;
  on<K extends keyof LaneCdcWakeSourceEventMap>(
    event: K,
    listener: (...args: LaneCdcWakeSourceEventMap[K]) => void,
  ): void;
}

/** At most this many messages named in one wake-up, as the lanes writer's NOTIFY (sql/lanes.ts). */
const MAX_NAMED = 64;

/**
 * Wake-ups for a lanes dispatcher (`createLaneDispatcher({ wakeSource })`) from the WAL instead of
 * NOTIFY: every committed transaction that wrote lane messages wakes the dispatcher with the due
 * ones named (`lane:id`), which it publishes by id when nothing can come before them, as it does
 * for the lanes writer's NOTIFY (lane-dispatcher.ts, `#publishHinted`). Producers pay nothing: no
 * waiter row is ever written, so the writer never notifies.
 *
 * Only a hint, as every wake source: the lanes' cursors are the guarantee. So the slot is
 * confirmed as soon as a transaction's wake-up is given (it never holds WAL back for a message
 * still to publish), and at every start it is moved to the end of WAL
 * (sql/cdc.ts `advanceSlotSql`) rather than replaying what was written while nobody streamed: the
 * catch-up wake-up after the start makes the dispatcher read its lanes, which finds all of it. A
 * stopped dispatcher's slot still keeps the WAL written since it stopped, until its next start:
 * drop the slot of a dispatcher you retire (`pg_drop_replication_slot`), and bound what a slot may
 * keep with `max_slot_wal_keep_size` (docs/latency.md).
 *
 * States: those of reconnecting.ts, `opening` being the slot checked, moved and the stream
 * opening, `open` streaming, and `waiting` a restart timer pending (the dispatcher polls
 * meanwhile).
 */
export function createLaneCdcWakeSource(options: LaneCdcWakeSourceOptions): LaneCdcWakeSource {
  return new PgLaneCdcWakeSource(options);
}

class PgLaneCdcWakeSource implements LaneCdcWakeSource {
  readonly #options: LaneCdcWakeSourceOptions;
  readonly #schema: string;
  readonly #publication: string;
  readonly #streamTimeoutMs: number;
  readonly #confirmIntervalMs: number;
  readonly #events = new TypedEmitter<LaneCdcWakeSourceEventMap>();
  readonly #life: Reconnecting;
  #slot: string | undefined;
  #stream: WalStream | undefined;
  #wake: (hint?: string) => void = () => undefined;
  /** Due messages of the transaction being streamed, as `lane:id`; undefined: too many to name. */
  #named: string[] | undefined = [];
  /** Where the stream has got to: confirmed at the next tick. */
  #position: Lsn = 0n;
  #confirmTimer: NodeJS.Timeout | undefined;

  constructor(options: LaneCdcWakeSourceOptions) {
    if (typeof options?.executor?.query !== 'function')
      throw new OutboxValidationError('executor', 'must be a SqlExecutor, e.g. fromPg(pool)');
    if (typeof options.replicationConnection !== 'object' || options.replicationConnection === null)
      throw new OutboxValidationError(
        'replicationConnection',
        'must be a pg ClientConfig, e.g. { connectionString: process.env.DATABASE_URL }',
      );
    this.#options = options;
    this.#schema = options.schema ?? DEFAULT_SCHEMA;
    quoteIdentifier(this.#schema);
    if (options.slotName !== undefined) quoteIdentifier(options.slotName, 'slotName');
    this.#slot = options.slotName;
    this.#publication =
      options.publicationName ?? `agent_outbox_lanes_${this.#schema}`.slice(0, 63);
    quoteIdentifier(this.#publication, 'publicationName');
    this.#confirmIntervalMs = positiveMs('confirmIntervalMs', options.confirmIntervalMs, 1_000);
    this.#streamTimeoutMs = positiveMs('streamTimeoutMs', options.streamTimeoutMs, 10_000);
    if (this.#streamTimeoutMs <= this.#confirmIntervalMs)
      throw new OutboxValidationError('streamTimeoutMs', 'must be greater than confirmIntervalMs');
    this.#life = new Reconnecting(() => void this.#open(), options.reconnectDelay);
  }

  get slot(): string | undefined {
    return this.#slot;
  }

  on<K extends keyof LaneCdcWakeSourceEventMap>(
    event: K,
    listener: (...args: LaneCdcWakeSourceEventMap[K]) => void,
  ): void {
    this.#events.on(event, listener);
  }

  /** Resolves after the first attempt to stream; a failure schedules a restart, never throws. */
  async start(wake: (hint?: string) => void): Promise<void> {
    if (this.#life.state !== 'created') throw new Error(`wake source is ${this.#life.state}`);
    this.#wake = wake;
    await this.#open();
  }

  async stop(): Promise<void> {
    this.#life.stop();
    clearInterval(this.#confirmTimer);
    const stream = this.#stream;
    this.#stream = undefined;
    if (!stream) return;
    await stream.confirm(this.#position).catch(() => undefined);
    await stream.close().catch(() => undefined);
  }

  async #open(): Promise<void> {
    this.#life.opening();
    try {
      const executor = this.#options.executor;
      const database = await currentDatabase(executor);
      const slot = (this.#slot ??= defaultSlotName(database, `lanes_${this.#schema}`));
      const { rows: server } = await executor.query<{ version: number }>(serverVersionNumSql);
      const columnList = Number(server[0]?.version) >= 150_000;
      await ensurePublication(
        executor,
        this.#publication,
        this.#schema,
        createLanePublicationSql(columnList),
      );
      const created = await ensureSlot(executor, slot, database);
      // Nothing before now is worth decoding: the catch-up wake-up below reads the lanes.
      const { rows } = await executor.query<{ lsn: string }>(advanceSlotSql, [slot]);
      const from = rows[0] ? parseLsn(rows[0].lsn) : created.confirmedLsn;
      this.#position = from;
      this.#named = [];
      // A loss reported before openWalStream returned (the stream had started) ends it at once.
      let earlyLoss: Error | undefined;
      const opened: { stream?: WalStream } = {};
      const stream = await openWalStream({
        connection: {
          application_name: 'agent-outbox-lanes-cdc',
          ...this.#options.replicationConnection,
        },
        slot,
        publication: this.#publication,
        schema: this.#schema,
        table: 'outbox_lane_messages',
        startLsn: from,
        silenceTimeoutMs: this.#streamTimeoutMs,
        handlers: {
          begin: () => {
            this.#named = [];
          },
          insert: (id, row) => {
            // A delayed message is not due: the lane read parks it (migration 026).
            if (row.available_at !== null && row.available_at !== undefined) return;
            if (this.#named && this.#named.length < MAX_NAMED)
              this.#named.push(`${String(row.lane)}:${id}`);
            else this.#named = undefined;
          },
          commit: (endLsn) => {
            const named = this.#named;
            this.#named = [];
            this.#position = endLsn;
            // Too many to name: a plain wake-up, the dispatcher reads its lanes.
            if (named === undefined) this.#wake();
            else if (named.length > 0) this.#wake(named.join(','));
          },
          keepalive: (lsn, replyRequested) => {
            if (lsn > this.#position) this.#position = lsn;
            if (replyRequested) void this.#confirm(false);
          },
          lost: (error) => {
            if (opened.stream) this.#lost(opened.stream, error);
            else earlyLoss = error;
          },
        },
      });
      opened.stream = stream;
      if (earlyLoss) {
        await stream.close().catch(() => undefined);
        throw earlyLoss;
      }
      if (this.#life.state === 'stopped') {
        await stream.close().catch(() => undefined);
        return;
      }
      this.#stream = stream;
      const reconnect = this.#life.opened();
      this.#confirmTimer = setInterval(() => void this.#confirm(true), this.#confirmIntervalMs);
      this.#confirmTimer.unref();
      this.#events.emit('cdc:stream:start', { slot, reconnect });
      // Catch-up: what was committed while nobody streamed is found by a lane read.
      this.#wake();
    } catch (error) {
      this.#scheduleRestart(toError(error));
    }
  }

  async #confirm(ping: boolean): Promise<void> {
    const stream = this.#stream;
    if (!stream || this.#life.state !== 'open') return;
    try {
      await stream.confirm(this.#position, ping);
    } catch (error) {
      this.#lost(stream, toError(error));
    }
  }

  #lost(stream: WalStream, error: Error): void {
    if (this.#stream !== stream || this.#life.state !== 'open') return;
    this.#stream = undefined;
    clearInterval(this.#confirmTimer);
    void stream.close().catch(() => undefined);
    this.#scheduleRestart(error);
  }

  /** Nothing once stopped. */
  #scheduleRestart(error: Error): void {
    const retryInMs = this.#life.failed();
    if (retryInMs !== undefined) this.#events.emit('cdc:stream:lost', { error, retryInMs });
  }
}
