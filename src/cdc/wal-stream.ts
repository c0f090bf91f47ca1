import type { ClientConfig } from 'pg';
import type { LogicalReplicationService, Pgoutput } from 'pg-logical-replication';
import { importPeer } from '../publishers/optional-peer.js';
import { formatLsn, parseLsn, type Lsn } from './lsn.js';

/** What the stream reports, in WAL order. Handlers run synchronously, in order. */
export interface WalStreamHandlers {
  begin(): void;
  /**
   * An outbox row was inserted (by the transaction being streamed); `row` holds its columns as
   * pgoutput decoded them.
   */
  insert(rowId: string, row: Record<string, unknown>): void;
  commit(endLsn: Lsn): void;
  /** The server has sent everything before `lsn`; `replyRequested`: answer now. */
  keepalive(lsn: Lsn, replyRequested: boolean): void;
  /** The connection failed or ended. Called once per stream. */
  lost(error: Error): void;
}

/** Options of {@link openWalStream}. */
export interface WalStreamOptions {
  connection: ClientConfig;
  slot: string;
  publication: string;
  /** Table whose inserts are reported; other tables of the publication are ignored. */
  schema: string;
  table: string;
  /** Resume from here (the slot's confirmed position, or ours). */
  startLsn: Lsn;
  handlers: WalStreamHandlers;
  /**
   * Nothing received (no data, no keepalive) for this long: the stream is lost. The caller pings
   * (`confirm(lsn, true)`) more often than this, and the server answers every ping. The same
   * bound applies to connecting and starting the stream. Default 0: no such bound.
   */
  silenceTimeoutMs?: number;
}

/** A running replication stream. */
export interface WalStream {
  /**
   * Tells the server everything before `lsn` is done: it may drop that WAL and will resume there
   * after a restart. `ping` asks for an immediate keepalive back.
   */
  confirm(lsn: Lsn, ping?: boolean): Promise<void>;
  close(): Promise<void>;
}

/**
 * `pg-logical-replication` with `pgoutput`, tamed for at-least-once:
 * - automatic acknowledgement is OFF (it would confirm every message as soon as it is RECEIVED,
 *   before anything was published); we confirm explicitly and answer keepalives ourselves;
 * - flow control is off, so `data` and `heartbeat` events reach us synchronously and in stream
 *   order — the tracker relies on a keepalive never overtaking a commit. Backpressure is handled
 *   one level up by closing the stream when too much is pending (resume re-streams from the
 *   confirmed position).
 * - the library's `acknowledge(lsn)` reports `lsn + 1`; Postgres' own subscriber reports the
 *   commit's END position itself, and a position one past it would let a transaction whose
 *   commit record starts exactly there be skipped after a restart. We pass `lsn - 1`.
 */
export async function openWalStream(options: WalStreamOptions): Promise<WalStream> {
  const lib = await importPeer(
    'pg-logical-replication',
    'the CDC dispatcher',
    () => import('pg-logical-replication'),
  );
  // Keepalive and a connect timeout unless the caller chose otherwise: a replication connection
  // that a partition froze is otherwise noticed by nothing (see silenceTimeoutMs for the rest).
  const connection = {
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    connectionTimeoutMillis: options.silenceTimeoutMs ?? 0,
    ...options.connection,
  };
  const service: LogicalReplicationService = new lib.LogicalReplicationService(connection, {
    acknowledge: { auto: false, timeoutSeconds: 0 },
    flowControl: { enabled: false },
  });
  // The library's stop() awaits the client's end(), which waits for the server's answer — for
  // good on a frozen connection. Destroying the socket first lets it finish at once.
  const socket = () =>
    (service as unknown as { _connection?: { stream?: { destroy(): void } } })._connection?.stream;
  const destroy = async () => {
    socket()?.destroy();
    await service.destroy().catch(() => undefined);
  };
  let heardAt = Date.now();
  let failStart: (error: Error) => void = () => undefined;
  const plugin = new lib.PgoutputPlugin({
    protoVersion: 1,
    publicationNames: [options.publication],
  });
  const { handlers } = options;
  let ended = false;
  let running = false;
  // Reported once, and only for a stream that had started: a failure to start is thrown instead.
  const end = (error: Error) => {
    if (ended) return;
    ended = true;
    clearInterval(watchdog);
    if (running) handlers.lost(error);
  };
  const silenceTimeoutMs = options.silenceTimeoutMs || Infinity;
  const watchdog = setInterval(
    () => {
      const silentMs = Date.now() - heardAt;
      if (silentMs < silenceTimeoutMs) return;
      const error = new Error(
        running
          ? `replication stream silent for ${silentMs} ms (no data, no keepalive)`
          : `replication stream not started within ${silentMs} ms`,
      );
      if (!running) failStart(error);
      end(error);
      void destroy();
    },
    Math.max(100, Math.min(1_000, silenceTimeoutMs / 4)),
  );
  watchdog.unref();
  service.on('error', (error: Error) => end(error));
  service.on('data', (_lsn: string, message: Pgoutput.Message) => {
    heardAt = Date.now();
    if (ended) return;
    switch (message.tag) {
      case 'begin':
        handlers.begin();
        break;
      case 'insert':
        if (message.relation.schema === options.schema && message.relation.name === options.table)
          handlers.insert(String(message.new.id), message.new as Record<string, unknown>);
        break;
      case 'commit':
        if (message.commitEndLsn) handlers.commit(parseLsn(message.commitEndLsn));
        break;
      default:
        break;
    }
  });
  service.on('heartbeat', (lsn: string, _timestamp: number, shouldRespond: boolean) => {
    heardAt = Date.now();
    if (!ended) handlers.keepalive(parseLsn(lsn), shouldRespond);
  });
  // subscribe() resolves only when the stream ends; a rejection is a failed or lost stream.
  const started = new Promise<void>((resolve, reject) => {
    // A connect or START_REPLICATION that gets no answer: reject here, whatever subscribe() does.
    failStart = reject;
    service.once('start', () => {
      running = true;
      heardAt = Date.now();
      resolve();
    });
    service
      .subscribe(plugin, options.slot, formatLsn(options.startLsn))
      .then(() => {
        const error = new Error('replication stream ended');
        reject(error);
        end(error);
      })
      .catch((error: unknown) => {
        const err = error instanceof Error ? error : new Error(String(error));
        reject(err);
        end(err);
      });
  });
  try {
    await started;
  } catch (error) {
    ended = true;
    clearInterval(watchdog);
    await destroy();
    throw error;
  }
  return {
    async confirm(lsn, ping = false) {
      if (ended || lsn <= 0n) return;
      await service.acknowledge(formatLsn(lsn - 1n), ping);
    },
    async close() {
      ended = true;
      clearInterval(watchdog);
      await destroy();
    },
  };
}
