import { parseArgs } from 'node:util';
import pg from 'pg';
import { DEFAULT_SCHEMA } from '../../core/identifier.js';
import {
  createDispatcher,
  type Dispatcher,
  type DispatcherStats,
  type DrainResult,
} from '../../dispatcher/dispatcher.js';
import type { DispatcherEventMap } from '../../dispatcher/events.js';
import type { DispatcherOptions } from '../../dispatcher/options.js';
import { createListenNotifyWakeSource } from '../../dispatcher/wake/listen-notify.js';
import type { WakeSource } from '../../dispatcher/wake-source.js';
import type { Publisher } from '../../publishers/publisher.js';
import type { SqlExecutor } from '../../store/sql-executor.js';
import { assertSchemaCurrent } from '../../migrations/migrate.js';
import { createPublisherFromUrl, PUBLISHER_URL_SCHEMES } from '../../publishers/from-url.js';
import {
  createPublisherFromConfig,
  loadPublisherConfig,
  PublisherConfigError,
} from '../../publishers/publisher-config.js';
import { importPeer } from '../../publishers/optional-peer.js';
import { WebhookSecretError } from '../../publishers/http/standard-webhooks.js';
import { createRetentionJob, poolSessions } from '../../retention/retention-job.js';
import { fromPg } from '../../store/from-pg.js';
import { redactUrl, resolveDatabaseUrl } from '../database.js';
import { positiveInt, validateSchemaFlag, COMMON_OPTIONS } from '../flags.js';
import { formatDuration, parseDuration } from '../format/duration.js';
import {
  logNatsStream,
  natsPublisherOptions,
  parseNatsStreamFlags,
} from '../dispatch/nats-stream.js';
import { EXIT, UsageError } from '../usage-error.js';
import {
  loadWebhookSecrets,
  refuseSecretOnCommandLine,
  WEBHOOK_SECRET_ENV,
} from '../dispatch/webhook-secrets.js';

export const dispatchHelp = `Usage: outbox dispatch (--publisher URL | --config FILE) [options]

Publishes committed outbox messages at least once: claims due messages under a lease
(FOR UPDATE SKIP LOCKED), publishes outside any transaction, marks them dispatched if it still
holds the lease. Run as many as you like, on as many hosts: they share the work.

Options:
  --database-url URL         Postgres connection string (default: $DATABASE_URL)
  --schema NAME              schema of the outbox tables (default: ${DEFAULT_SCHEMA})
  --publisher URL            where to publish: ${PUBLISHER_URL_SCHEMES.map((s) => `${s}://`).join(', ')}
  --config FILE              route topics to several publishers: a JSON file (or outbox.config.js
                             with a default export) like
                             {"routes":[{"pattern":"mail.*","publisher":"nats://127.0.0.1:4222"},
                                        {"pattern":"payment.**","publisher":"amqp://..."}],
                              "fallback":"http://127.0.0.1:8080/outbox"}
                             ('*' = one dot-separated segment, '**' = any; first match wins;
                             unmatched topics without a fallback are dead-lettered)
  --once                     drain everything due, then exit (0 = all published, 1 = something failed)
  --mode poll|cdc            poll (default): claim on a timer, woken at once by LISTEN/NOTIFY;
                             cdc: follow the outbox's inserts over logical replication
                             (needs wal_level=logical; see docs/latency.md for the slot risks)
  --no-listen                poll mode: no LISTEN/NOTIFY wake-ups, poll only
  --fallback-poll-ms N       poll mode with LISTEN/NOTIFY: safety-net poll interval (default 5000)
  --slot NAME                cdc mode: replication slot (created once, reused; default derived
                             from the schema)
  --publication NAME         cdc mode: publication of the outbox table (created if missing)
  --sweep-interval-ms N      cdc mode: polling sweeper interval for anything the stream missed
                             (default 30000)
  --batch-size N             messages per claim (default 200)
  --lease-ms N               exclusive claim duration; a crashed dispatcher's messages wait this
                             long before another takes them (default 30000)
  --poll-interval-ms N       wait after an empty claim (default 1000; 5000 with LISTEN/NOTIFY)
  --concurrency N            batches in flight at once (default 1)
  --async-settle             settle without waiting for the WAL flush (for slow disks); a
                             Postgres crash may then lose the last ~0.6 s of settles: those
                             messages are published again, same message id (claims always
                             wait; see docs/latency.md, "Commit mode")
  --backoff-base-ms N        delay after the first failure, doubling (default 30000)
  --backoff-max-ms N         cap of the doubling delay (default 900000)
  --backoff-jitter-ms N      random extra delay, up to (default 5000)
  --max-attempts N           attempts before dead-lettering (default 10)
  --unordered GLOB           topics without per-aggregate order, e.g. 'mail.*' (repeatable,
                             or comma-separated); all other topics are ordered. Declared in
                             the database (outbox_unordered_topics) at start: it applies to
                             messages written from then on, whichever dispatcher sends them
  --dead-letter-policy P     hold (default): a dead letter blocks its aggregate's later
                             ordered messages; skip: they go on
  --nats-stream NAME         nats:// only: the JetStream stream to publish into. An existing
                             stream (e.g. yours) is used as it is and never changed; a topic
                             whose subject it does not capture is dead-lettered with a
                             last_error saying so (add the subject, then outbox replay). A
                             missing stream is created (see --nats-subjects)
  --nats-subjects LIST       nats:// with --nats-stream only: subjects to create a missing
                             stream with, comma-separated or repeated, NATS wildcards allowed
                             ('orders.created,orders.*.refund,audit.>'); ignored when the
                             stream exists. Default: one subject per topic's first segment,
                             added as topics arrive (mail.send -> mail.>)
  --http-timeout-ms N        http(s):// only: request timeout (default 10000)
  --webhook-secret-file PATH http(s):// only: sign every request (Standard Webhooks:
                             webhook-id, webhook-timestamp, webhook-signature) with the
                             whsec_ secrets in PATH, one per line (two while rotating);
                             or set $OUTBOX_WEBHOOK_SECRET instead (never a flag value)
  --metrics-port N           serve Prometheus metrics on /metrics and a health check on
                             /healthz (needs prom-client; see docs/operations.md)
  --metrics-host ADDR        interface for the metrics server (default 127.0.0.1)
  --health-stall-ms N        /healthz answers 503 when messages are due and none was
                             dispatched for this long (default 300000)
  --prune-older-than DUR     also run retention in this process, e.g. 30d: delete dispatched
                             rows older than DUR every --prune-interval; one process per
                             schema prunes at a time (advisory lock), the others skip;
                             not with --once (use outbox prune)
  --prune-archive            move pruned rows to outbox_archive instead of deleting them
  --prune-ledger-older-than DUR  also prune done consumer-ledger rows older than DUR (e.g. 14d)
  --prune-interval DUR       time between retention runs (default 1h)
  --json                     log one JSON object per line instead of text
  -h, --help                 show this help

Environment:
  OUTBOX_WEBHOOK_SECRET      http(s):// only: whsec_ signing secret(s), space-separated (new
                             first, then the old one while rotating); a malformed one exits 2

Signals: SIGINT/SIGTERM stop claiming, let in-flight publishes finish (bounded by the lease)
and settle, then exit 0. A second signal exits at once (leases then expire on their own).
`;

export async function dispatchCommand(argv: string[]): Promise<number> {
  refuseSecretOnCommandLine(argv);
  const { values } = parseArgs({
    args: argv,
    options: {
      ...COMMON_OPTIONS,
      publisher: { type: 'string' },
      config: { type: 'string' },
      once: { type: 'boolean', default: false },
      mode: { type: 'string', default: 'poll' },
      'no-listen': { type: 'boolean', default: false },
      'fallback-poll-ms': { type: 'string' },
      slot: { type: 'string' },
      publication: { type: 'string' },
      'sweep-interval-ms': { type: 'string' },
      'batch-size': { type: 'string' },
      'lease-ms': { type: 'string' },
      'poll-interval-ms': { type: 'string' },
      concurrency: { type: 'string' },
      'async-settle': { type: 'boolean', default: false },
      'backoff-base-ms': { type: 'string' },
      'backoff-max-ms': { type: 'string' },
      'backoff-jitter-ms': { type: 'string' },
      'max-attempts': { type: 'string' },
      unordered: { type: 'string', multiple: true },
      'dead-letter-policy': { type: 'string', default: 'hold' },
      'nats-stream': { type: 'string' },
      'nats-subjects': { type: 'string', multiple: true },
      'http-timeout-ms': { type: 'string' },
      'webhook-secret-file': { type: 'string' },
      'metrics-port': { type: 'string' },
      'metrics-host': { type: 'string', default: '127.0.0.1' },
      'health-stall-ms': { type: 'string' },
      'prune-older-than': { type: 'string' },
      'prune-archive': { type: 'boolean', default: false },
      'prune-ledger-older-than': { type: 'string' },
      'prune-interval': { type: 'string' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(dispatchHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  if (!values.publisher && !values.config)
    throw new UsageError(
      '--publisher URL or --config FILE is required, e.g. --publisher http://127.0.0.1:8080/outbox',
    );
  if (values.publisher && values.config)
    throw new UsageError('give --publisher or --config, not both');
  if (values.mode !== 'poll' && values.mode !== 'cdc')
    throw new UsageError(`--mode must be poll or cdc, got "${values.mode}"`);
  if (values.mode === 'cdc' && values.once)
    throw new UsageError('--mode cdc cannot be combined with --once (use poll mode for cron runs)');
  // LISTEN/NOTIFY is on by default for a long-running poll dispatcher; --once never waits.
  const useListen = values.mode === 'poll' && !values['no-listen'] && !values.once;
  const policy = values['dead-letter-policy'];
  if (policy !== 'hold' && policy !== 'skip')
    throw new UsageError(`--dead-letter-policy must be hold or skip, got "${policy}"`);
  const nonNegative = (flag: string, value: string | undefined): number | undefined => {
    if (value === undefined) return undefined;
    const n = Number(value);
    if (!Number.isFinite(n) || n < 0)
      throw new UsageError(`--${flag} must be a number >= 0, got "${value}"`);
    return n;
  };
  const options = {
    schema: values.schema,
    batchSize: positiveInt('batch-size', values['batch-size'], 200),
    leaseMs: positiveInt('lease-ms', values['lease-ms'], 30_000),
    pollIntervalMs:
      useListen && values['poll-interval-ms'] === undefined
        ? positiveInt('fallback-poll-ms', values['fallback-poll-ms'], 5_000)
        : positiveInt('poll-interval-ms', values['poll-interval-ms'], 1_000),
    concurrency: positiveInt('concurrency', values.concurrency, 1),
    asyncSettle: values['async-settle'],
    maxAttempts: positiveInt('max-attempts', values['max-attempts'], 10),
    backoff: {
      baseMs: nonNegative('backoff-base-ms', values['backoff-base-ms']),
      maxMs: nonNegative('backoff-max-ms', values['backoff-max-ms']),
      jitterMs: nonNegative('backoff-jitter-ms', values['backoff-jitter-ms']),
    },
    unorderedTopics: (values.unordered ?? [])
      .flatMap((v) => v.split(','))
      .map((v) => v.trim())
      .filter(Boolean),
    deadLetterPolicy: policy as 'hold' | 'skip',
  };
  const httpTimeoutMs =
    values['http-timeout-ms'] === undefined
      ? undefined
      : positiveInt('http-timeout-ms', values['http-timeout-ms'], 10_000);
  const metricsPort =
    values['metrics-port'] === undefined
      ? undefined
      : positiveInt('metrics-port', values['metrics-port'], 9464);
  if (metricsPort !== undefined && metricsPort > 65_535)
    throw new UsageError(`--metrics-port must be at most 65535, got ${metricsPort}`);
  const healthStallMs = positiveInt('health-stall-ms', values['health-stall-ms'], 300_000);
  const natsStream = parseNatsStreamFlags({
    publisher: values.publisher,
    stream: values['nats-stream'],
    subjects: values['nats-subjects'],
  });
  const pruneOlderThanMs =
    values['prune-older-than'] === undefined
      ? undefined
      : parseDuration('prune-older-than', values['prune-older-than']);
  if (
    pruneOlderThanMs === undefined &&
    (values['prune-archive'] || values['prune-ledger-older-than'] || values['prune-interval'])
  )
    throw new UsageError(
      '--prune-archive, --prune-ledger-older-than and --prune-interval need --prune-older-than',
    );
  const sweepIntervalMs = positiveInt('sweep-interval-ms', values['sweep-interval-ms'], 30_000);
  const webhookSecrets = await loadWebhookSecrets({
    publisher: values.publisher,
    env: process.env[WEBHOOK_SECRET_ENV],
    file: values['webhook-secret-file'],
  });
  const url = resolveDatabaseUrl(values['database-url']);
  const log = logger(values.json);

  const pool = new pg.Pool({
    connectionString: url,
    // +1 each for the metrics gauges and the retention session (held for a whole run).
    max:
      options.concurrency +
      2 +
      (values.mode === 'cdc' ? 1 : 0) +
      (metricsPort === undefined ? 0 : 1) +
      (pruneOlderThanMs === undefined ? 0 : 1),
    application_name: 'agent-outbox-dispatcher',
  });
  // Idle clients that lose their connection emit 'error'; the pool replaces them. Never crash.
  pool.on('error', (error) =>
    log('warn', 'idle database connection lost', { error: error.message }),
  );
  const publisher = values.config
    ? await publisherFromConfig(values.config, webhookSecrets)
    : await createPublisherFromUrl(values.publisher!, {
        ...natsPublisherOptions(natsStream, log),
        ...(httpTimeoutMs !== undefined && { httpTimeoutMs }),
        ...(webhookSecrets && { httpSigningSecrets: webhookSecrets }),
      });
  const cleanups: (() => Promise<void>)[] = [];
  try {
    await assertSchemaCurrent(fromPg(pool), values.schema);
    const dispatcher: DispatchRunner =
      values.mode === 'cdc'
        ? await cdcRunner({
            executor: fromPg(pool),
            publisher,
            options,
            url,
            slot: values.slot,
            publication: values.publication,
            sweepIntervalMs,
            log,
          })
        : pollRunner(
            createDispatcher({
              executor: fromPg(pool),
              publisher,
              ...options,
              ...(useListen && { wakeSource: listenWakeSource(url, values.schema, log) }),
            }),
          );
    if (metricsPort !== undefined) {
      // Loaded only when asked for: prom-client is an optional peer dependency.
      const { serveDispatcherMetrics } = await importPeer(
        'prom-client',
        '--metrics-port',
        () => import('../../metrics/serve-dispatcher-metrics.js'),
      );
      const served = await serveDispatcherMetrics({
        // The metrics hook only uses on() and stats(), which both runners have.
        dispatcher: dispatcher as unknown as Dispatcher,
        executor: fromPg(pool),
        schema: values.schema,
        port: metricsPort,
        host: values['metrics-host'],
        healthStallMs,
      });
      cleanups.push(served.close);
      dispatcher.onSlotLag?.((slot, lagBytes) => served.metrics.setCdcSlotLagBytes(slot, lagBytes));
      log('info', `metrics on ${served.url}/metrics, health on ${served.url}/healthz`);
    }
    if (pruneOlderThanMs !== undefined && !values.once) {
      const retention = createRetentionJob({
        connect: poolSessions(pool),
        schema: values.schema,
        olderThanMs: pruneOlderThanMs,
        archive: values['prune-archive'],
        ledgerOlderThanMs:
          values['prune-ledger-older-than'] === undefined
            ? null
            : parseDuration('prune-ledger-older-than', values['prune-ledger-older-than']),
        intervalMs:
          values['prune-interval'] === undefined
            ? 3_600_000
            : parseDuration('prune-interval', values['prune-interval']),
      });
      retention.on('retention:run:success', ({ outbox, ledger, durationMs }) =>
        log('info', 'retention run', {
          removed: outbox.removed,
          archived: outbox.archived,
          ledgerDeleted: ledger?.deleted ?? 0,
          durationMs,
        }),
      );
      retention.on('retention:run:skipped', () =>
        log('info', 'retention skipped: another process holds the retention lock'),
      );
      retention.on('retention:run:failure', ({ error }) =>
        log('error', 'retention run failed', { error: error.message }),
      );
      retention.start();
      cleanups.push(() => retention.stop());
      log('info', `retention: dispatched rows older than ${formatDuration(pruneOlderThanMs)}`);
    }
    dispatcher.on('dispatcher:claim:failure', ({ error, retryInMs }) =>
      log('error', 'claim failed', { error: error.message, retryInMs }),
    );
    dispatcher.on('dispatcher:settle:failure', ({ error, messages }) =>
      log('error', 'settle failed; messages will be published again after the lease expires', {
        error: error.message,
        messages,
      }),
    );
    dispatcher.on('dispatcher:dead-letter', ({ message, error }) =>
      log('warn', 'dead-lettered', {
        id: message.id,
        topic: message.topic,
        aggregateId: message.aggregateId,
        attempts: message.attempts,
        error,
      }),
    );
    log(
      'info',
      `${values.mode} dispatcher ${dispatcher.id} on ${redactUrl(url)} → ${values.config ? `routes from ${values.config}` : redactUrl(values.publisher!)}`,
      {
        once: values.once,
        listen: useListen,
        batchSize: options.batchSize,
        leaseMs: options.leaseMs,
        // How many, never which: enough to tell a signed run from an unsigned one.
        ...(webhookSecrets && { webhookSigningSecrets: webhookSecrets.length }),
      },
    );
    await logNatsStream(publisher, log);

    if (values.once) {
      dispatcher.on('dispatcher:settle:success', ({ settled }) => {
        if (settled > 0) log('info', 'batch settled', progress(dispatcher.stats()));
      });
      const result = await dispatcher.drain!();
      log('info', result.failed ? 'drained with failures' : 'drained', progress(result));
      return result.failed ? EXIT.failure : EXIT.ok;
    }

    await dispatcher.start();
    const summary = setInterval(
      () => log('info', 'progress', progress(dispatcher.stats())),
      10_000,
    );
    summary.unref();
    await waitForSignal(log);
    log('info', 'stopping: finishing in-flight work');
    await dispatcher.stop();
    clearInterval(summary);
    log('info', 'stopped', progress(dispatcher.stats()));
    return EXIT.ok;
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
    await publisher.close?.().catch(() => undefined);
    await pool.end().catch(() => undefined);
  }
}

function progress(stats: DispatcherStats): Record<string, number> {
  return {
    published: stats.published,
    retried: stats.retried,
    deadLettered: stats.deadLettered,
    fenced: stats.fenced,
    batches: stats.batches,
  };
}

type Log = (
  level: 'info' | 'warn' | 'error',
  message: string,
  fields?: Record<string, unknown>,
) => void;

function logger(json: boolean): Log {
  return (level, message, fields = {}) => {
    const stream = level === 'info' ? process.stdout : process.stderr;
    if (json) {
      stream.write(
        `${JSON.stringify({ time: new Date().toISOString(), level, message, ...fields })}\n`,
      );
    } else {
      const extra = Object.entries(fields).map(
        ([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`,
      );
      stream.write(
        `${new Date().toISOString()} ${level.padEnd(5)} ${message}${extra.length ? ` ${extra.join(' ')}` : ''}\n`,
      );
    }
  };
}

function waitForSignal(log: Log): Promise<void> {
  return new Promise((resolve) => {
    const onSignal = (signal: NodeJS.Signals) => {
      log('info', `received ${signal}`);
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      // A second signal means "now": leases expire on their own, nothing is lost.
      const force = () => process.exit(EXIT.failure);
      process.once('SIGINT', force);
      process.once('SIGTERM', force);
      resolve();
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
}

/**
 * Loads a routing config; its mistakes are the command line's (exit 2), not runtime failures.
 * `webhookSecrets` (from the environment or --webhook-secret-file) sign its http(s) routes.
 */
async function publisherFromConfig(path: string, webhookSecrets: string[] | undefined) {
  try {
    const config = await loadPublisherConfig(path);
    return await createPublisherFromConfig(
      webhookSecrets
        ? { ...config, options: { ...config.options, httpSigningSecrets: webhookSecrets } }
        : config,
    );
  } catch (error) {
    if (error instanceof PublisherConfigError || error instanceof WebhookSecretError)
      throw new UsageError(error.message);
    if ((error as NodeJS.ErrnoException).code === 'ENOENT')
      throw new UsageError(`--config ${path}: no such file`);
    throw error;
  }
}

/** What the command drives: the polling dispatcher or the CDC dispatcher, seen the same way. */
interface DispatchRunner {
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

function pollRunner(dispatcher: Dispatcher): DispatchRunner {
  return {
    id: dispatcher.id,
    start: async () => dispatcher.start(),
    stop: () => dispatcher.stop(),
    stats: () => dispatcher.stats(),
    drain: () => dispatcher.drain(),
    on: (event, listener) => dispatcher.on(event, listener),
  };
}

function listenWakeSource(url: string, schema: string, log: Log): WakeSource {
  const source = createListenNotifyWakeSource({
    schema,
    connect: async () => {
      const client = new pg.Client({
        connectionString: url,
        keepAlive: true,
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

async function cdcRunner(args: {
  executor: SqlExecutor;
  publisher: Publisher;
  options: Omit<DispatcherOptions, 'publisher' | 'executor'>;
  url: string;
  slot: string | undefined;
  publication: string | undefined;
  sweepIntervalMs: number;
  log: Log;
}): Promise<DispatchRunner> {
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
    replicationConnection: { connectionString: args.url, application_name: 'agent-outbox-cdc' },
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
