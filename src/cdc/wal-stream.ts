import type { ClientConfig } from 'pg';
import type { LogicalReplicationService, Pgoutput } from 'pg-logical-replication';
import { importPeer } from '../publishers/optional-peer.js';
import { formatLsn, parseLsn, type Lsn } from './lsn.js';

/** What the stream reports, in WAL order. Handlers run synchronously, in order. */
export interface WalStreamHandlers {
  begin(): void;
  /** An outbox row was inserted (by the transaction being streamed). */
  insert(rowId: string): void;
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
  const service: LogicalReplicationService = new lib.LogicalReplicationService(options.connection, {
    acknowledge: { auto: false, timeoutSeconds: 0 },
    flowControl: { enabled: false },
  });
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
    if (running) handlers.lost(error);
  };
  service.on('error', (error: Error) => end(error));
  service.on('data', (_lsn: string, message: Pgoutput.Message) => {
    if (ended) return;
    switch (message.tag) {
      case 'begin':
        handlers.begin();
        break;
      case 'insert':
        if (message.relation.schema === options.schema && message.relation.name === options.table)
          handlers.insert(String(message.new.id));
        break;
      case 'commit':
        if (message.commitEndLsn) handlers.commit(parseLsn(message.commitEndLsn));
        break;
      default:
        break;
    }
  });
  service.on('heartbeat', (lsn: string, _timestamp: number, shouldRespond: boolean) => {
    if (!ended) handlers.keepalive(parseLsn(lsn), shouldRespond);
  });
  // subscribe() resolves only when the stream ends; a rejection is a failed or lost stream.
  const started = new Promise<void>((resolve, reject) => {
    service.once('start', () => {
      running = true;
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
    await service.destroy().catch(() => undefined);
    throw error;
  }
  return {
    async confirm(lsn, ping = false) {
      if (ended || lsn <= 0n) return;
      await service.acknowledge(formatLsn(lsn - 1n), ping);
    },
    async close() {
      ended = true;
      await service.destroy().catch(() => undefined);
    },
  };
}
