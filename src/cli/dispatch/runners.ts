import type { Dispatcher, DispatcherStats, DrainResult } from '../../dispatcher/dispatcher.js';
import type { DispatcherEventMap } from '../../dispatcher/events.js';
import type { DispatcherOptions } from '../../dispatcher/options.js';
import { createListenNotifyWakeSource } from '../../dispatcher/wake/listen-notify.js';
import type { WakeSource } from '../../dispatcher/wake-source.js';
import { importPeer } from '../../publishers/optional-peer.js';
import type { Publisher } from '../../publishers/publisher.js';
import { createPgClient } from '../../store/multi-host-pool.js';
import { parseMultiHostUrl } from '../../store/multi-host-url.js';
import type { SqlExecutor } from '../../store/sql-executor.js';
import type { Log } from '../log.js';
import { UsageError } from '../usage-error.js';

/**
 * The two ways `outbox dispatch` runs — the polling dispatcher (woken by LISTEN/NOTIFY) and the
 * CDC dispatcher (logical replication, optional peer `pg-logical-replication`) — behind one
 * interface the command drives.
 */

/** What the command drives: the polling dispatcher or the CDC dispatcher, seen the same way. */
export interface DispatchRunner {
  id: string;
  start(): Promise<void>;
  stop(): Promise<void>;
  stats(): DispatcherStats;
  drain?(): Promise<DrainResult>;
  on<K extends keyof DispatcherEventMap & string>(
    event: K,
    listener: (...args: DispatcherEventMap[K]) => void,
  ): () => void;
  onSlotLag?(listener: (slot: string, lagBytes: number) => void): void;
}

export function pollRunner(dispatcher: Dispatcher): DispatchRunner {
  return {
    id: dispatcher.id,
    start: async () => dispatcher.start(),
    stop: () => dispatcher.stop(),
    stats: () => dispatcher.stats(),
    drain: () => dispatcher.drain(),
    on: (event, listener) => dispatcher.on(event, listener),
  };
}

/** Default of `--connect-timeout-ms`. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

/** Connection settings of every connection `outbox dispatch` opens. */
export interface ConnectionSettings {
  keepAlive: true;
  keepAliveInitialDelayMillis: number;
  connectionTimeoutMillis: number;
}

/**
 * TCP keepalive on every connection, first probe after 10 s idle: a connection a network
 * partition froze (nothing closed) is then dropped by the operating system within about a
 * minute even while idle, instead of never (Linux's default waits two hours before the first
 * probe). And a connect that gets no answer fails after `connectTimeoutMs` instead of waiting
 * for good. Statement timeouts are the dispatcher's (`--statement-timeout-ms`).
 */
export function connectionSettings(connectTimeoutMs: number): ConnectionSettings {
  return {
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    connectionTimeoutMillis: connectTimeoutMs,
  };
}

export function listenWakeSource(
  url: string,
  connection: ConnectionSettings,
  schema: string,
  log: Log,
): WakeSource {
  const source = createListenNotifyWakeSource({
    schema,
    connectTimeoutMs: connection.connectionTimeoutMillis,
    connect: async () => {
      const client = createPgClient(url, {
        ...connection,
        application_name: 'agent-outbox-listen',
      });
      client.on('error', () => undefined); // the wake source attaches its own handlers
      await client.connect();
      return client;
    },
  });
  source.on('listen:connection:lost', ({ error, retryInMs }) =>
    log('warn', 'LISTEN connection lost; polling continues', { error: error.message, retryInMs }),
  );
  source.on('listen:connection:open', ({ reconnect }) => {
    if (reconnect) log('info', 'LISTEN re-established; catch-up claim');
  });
  return source;
}

const ONE_HOST_CDC =
  '--mode cdc takes a database URL of one host: a replication stream does not follow a failover. Use --mode poll with several hosts, or give CDC the address of a proxy that follows the primary';

/**
 * `--engine lanes --mode cdc`: the lanes dispatcher woken from the WAL
 * (cdc/lane-cdc-wake-source.ts) instead of LISTEN/NOTIFY. Its poll stays the guarantee.
 */
export async function laneCdcWakeSource(args: {
  executor: SqlExecutor;
  url: string;
  connection: ConnectionSettings;
  schema: string;
  slot: string | undefined;
  publication: string | undefined;
  log: Log;
}): Promise<WakeSource> {
  if (parseMultiHostUrl(args.url)?.plain === false) throw new UsageError(ONE_HOST_CDC);
  // Loaded only in cdc mode: pg-logical-replication is an optional peer dependency.
  const { createLaneCdcWakeSource } = await importPeer(
    'pg-logical-replication',
    '--mode cdc',
    () => import('../../cdc/index.js'),
  );
  const source = createLaneCdcWakeSource({
    executor: args.executor,
    schema: args.schema,
    replicationConnection: { connectionString: args.url, ...args.connection },
    ...(args.slot && { slotName: args.slot }),
    ...(args.publication && { publicationName: args.publication }),
  });
  source.on('cdc:stream:start', ({ slot, reconnect }) =>
    args.log('info', reconnect ? 'CDC streaming again; catch-up read' : 'CDC streaming', { slot }),
  );
  source.on('cdc:stream:lost', ({ error, retryInMs }) =>
    args.log('warn', 'CDC stream lost; polling continues', { error: error.message, retryInMs }),
  );
  return source;
}

export async function cdcRunner(args: {
  executor: SqlExecutor;
  publisher: Publisher;
  options: Omit<DispatcherOptions, 'publisher' | 'executor'>;
  url: string;
  connection: ConnectionSettings;
  slot: string | undefined;
  publication: string | undefined;
  sweepIntervalMs: number;
  log: Log;
}): Promise<DispatchRunner> {
  if (parseMultiHostUrl(args.url)?.plain === false)
    // The stream would stay on the host it found first; and PostgreSQL 15 copies no logical
    // slot to a standby, so after a failover there is none to follow on the new primary anyway.
    throw new UsageError(ONE_HOST_CDC);
  // Loaded only in cdc mode: pg-logical-replication is an optional peer dependency.
  const { createCdcDispatcher } = await importPeer(
    'pg-logical-replication',
    '--mode cdc',
    () => import('../../cdc/index.js'),
  );
  const { pollIntervalMs: _poll, ...options } = args.options;
  const cdc = createCdcDispatcher({
    executor: args.executor,
    publisher: args.publisher,
    ...options,
    replicationConnection: {
      connectionString: args.url,
      ...args.connection,
      application_name: 'agent-outbox-cdc',
    },
    ...(args.slot && { slotName: args.slot }),
    ...(args.publication && { publicationName: args.publication }),
    sweepIntervalMs: args.sweepIntervalMs,
  });
  cdc.on('cdc:stream:start', (event) => args.log('info', 'CDC streaming', { ...event }));
  cdc.on('cdc:stream:lost', ({ error, retryInMs }) =>
    args.log('warn', 'CDC stream lost; the sweeper keeps polling', {
      error: error.message,
      retryInMs,
    }),
  );
  cdc.on('cdc:slot:create', (event) => args.log('info', 'replication slot created', { ...event }));
  cdc.on('cdc:cycle:failure', ({ error }) =>
    args.log('error', 'CDC cycle failed', { error: error.message }),
  );
  return {
    id: `cdc:${args.slot ?? 'default-slot'}`,
    start: () => cdc.start(),
    stop: () => cdc.stop(),
    stats: () => cdc.totals(),
    on: (event, listener) => cdc.on(event, listener),
    onSlotLag: (listener) => {
      cdc.on('cdc:slot:lag', ({ slot, lagBytes }) => listener(slot, lagBytes));
    },
  };
}
