import { parseFlags } from '../parse-flags.js';
import type { Dispatcher } from '../../dispatcher/dispatcher.js';
import { createPublisherFromUrl } from '../../publishers/from-url.js';
import { importPeer } from '../../publishers/optional-peer.js';
import { assertSqliteSchemaCurrent } from '../../stores/sqlite/migrate-sqlite.js';
import { openSqlite } from '../../stores/sqlite/open-sqlite.js';
import { readSqliteStatus } from '../../stores/sqlite/sqlite-admin.js';
import { createSqliteDispatcher } from '../../stores/sqlite/sqlite-dispatcher.js';
import { pruneSqliteOutbox } from '../../stores/sqlite/sqlite-retention.js';
import { logDispatcherEvents, progress } from '../dispatch/event-log.js';
import { waitForSignal } from '../dispatch/wait-for-signal.js';
import { checkPublisherScheme, publisherFromConfig } from '../dispatch/publisher-flags.js';
import { pollRunner } from '../dispatch/runners.js';
import {
  loadWebhookSecrets,
  refuseSecretOnCommandLine,
  WEBHOOK_SECRET_ENV,
} from '../dispatch/webhook-secrets.js';
import { listFlag, positiveInt } from '../flags.js';
import { formatDuration, parseDuration } from '../format/duration.js';
import { createLogger, LOG_FORMAT_ENV, resolveLogFormat, type Log } from '../log.js';
import { EXIT, UsageError } from '../usage-error.js';

export const sqliteDispatchHelp = `Usage: outbox dispatch --database-url file:./agent.db --publisher URL [options]

The polling dispatcher on a SQLite file (also sqlite:./agent.db). Several may run on one file:
leases keep them apart. No LISTEN/NOTIFY on SQLite: new messages are found by polling.

Options:
  --publisher URL          where to publish (http(s)://, nats://, amqp://, redis://, memory:)
  --config FILE            routes from a file instead of --publisher
  --once                   drain what is due and exit (exit 1 if anything failed)
  --batch-size N           messages per claim (default 200)
  --lease-ms N             how long a claim keeps other dispatchers away (default 30000)
  --poll-interval-ms N     wait after a claim that found nothing (default 1000)
  --concurrency N          claim loops in this process (default 1)
  --max-attempts N         attempts before a dead letter (default 10)
  --backoff-base-ms, --backoff-max-ms, --backoff-jitter-ms N
  --unordered GLOB         topics outside their aggregate's order (repeatable)
  --dead-letter-policy P   hold (default) or skip
  --busy-timeout-ms N      wait this long for another process's write lock (default 10000)
  --http-timeout-ms N      webhook request timeout
  --webhook-secret-file F  sign webhook deliveries (or $${WEBHOOK_SECRET_ENV})
  --metrics-port N         serve /metrics and /healthz on 127.0.0.1 (--metrics-host to change)
  --prune-older-than DUR   delete dispatched messages older than DUR every --prune-interval (1h)
  --log-format text|json
`;

/** `outbox dispatch` on a SQLite file. */
export async function sqliteDispatchCommand(url: string, argv: string[]): Promise<number> {
  refuseSecretOnCommandLine(argv);
  const { values } = parseFlags({
    args: argv,
    options: {
      'database-url': { type: 'string' },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
      publisher: { type: 'string' },
      config: { type: 'string' },
      once: { type: 'boolean', default: false },
      'batch-size': { type: 'string' },
      'lease-ms': { type: 'string' },
      'poll-interval-ms': { type: 'string' },
      concurrency: { type: 'string' },
      'async-settle': { type: 'boolean', default: false },
      'max-attempts': { type: 'string' },
      'backoff-base-ms': { type: 'string' },
      'backoff-max-ms': { type: 'string' },
      'backoff-jitter-ms': { type: 'string' },
      unordered: { type: 'string', multiple: true },
      'dead-letter-policy': { type: 'string', default: 'hold' },
      'busy-timeout-ms': { type: 'string' },
      'http-timeout-ms': { type: 'string' },
      'webhook-secret-file': { type: 'string' },
      'metrics-port': { type: 'string' },
      'metrics-host': { type: 'string', default: '127.0.0.1' },
      'health-stall-ms': { type: 'string' },
      'prune-older-than': { type: 'string' },
      'prune-interval': { type: 'string' },
      'log-format': { type: 'string' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(sqliteDispatchHelp);
    return EXIT.ok;
  }
  const log = createLogger(
    resolveLogFormat(values['log-format'], values.json, process.env[LOG_FORMAT_ENV]),
  );
  if (!values.publisher === !values.config)
    throw new UsageError('give --publisher URL or --config FILE (one of them)');
  if (values.publisher) checkPublisherScheme(values.publisher);
  const policy = values['dead-letter-policy'];
  if (policy !== 'hold' && policy !== 'skip')
    throw new UsageError(`--dead-letter-policy must be hold or skip, got "${policy}"`);
  const ms = (flag: string, value: string | undefined): number | undefined => {
    if (value === undefined) return undefined;
    const n = Number(value);
    if (!Number.isFinite(n) || n < 0)
      throw new UsageError(`--${flag} must be a number >= 0, got "${value}"`);
    return n;
  };
  const metricsPort =
    values['metrics-port'] === undefined
      ? undefined
      : positiveInt('metrics-port', values['metrics-port'], 9464);
  const pruneOlderThanMs =
    values['prune-older-than'] === undefined
      ? undefined
      : parseDuration('prune-older-than', values['prune-older-than']);
  const pruneIntervalMs =
    values['prune-interval'] === undefined
      ? 3_600_000
      : parseDuration('prune-interval', values['prune-interval']);
  const webhookSecrets = await loadWebhookSecrets({
    publisher: values.publisher,
    env: process.env[WEBHOOK_SECRET_ENV],
    file: values['webhook-secret-file'],
  });
  const httpTimeoutMs =
    values['http-timeout-ms'] === undefined
      ? undefined
      : positiveInt('http-timeout-ms', values['http-timeout-ms'], 10_000);

  const db = await openSqlite(url, {
    busyTimeoutMs: positiveInt('busy-timeout-ms', values['busy-timeout-ms'], 10_000),
  });
  const publisher = values.config
    ? await publisherFromConfig(values.config, webhookSecrets)
    : await createPublisherFromUrl(values.publisher!, {
        ...(httpTimeoutMs !== undefined && { httpTimeoutMs }),
        ...(webhookSecrets && { httpSigningSecrets: webhookSecrets }),
      });
  const cleanups: (() => Promise<void> | void)[] = [];
  try {
    assertSqliteSchemaCurrent(db);
    const dispatcher = createSqliteDispatcher({
      database: db,
      publisher,
      batchSize: positiveInt('batch-size', values['batch-size'], 200),
      leaseMs: positiveInt('lease-ms', values['lease-ms'], 30_000),
      pollIntervalMs: positiveInt('poll-interval-ms', values['poll-interval-ms'], 1_000),
      concurrency: positiveInt('concurrency', values.concurrency, 1),
      asyncSettle: values['async-settle'],
      maxAttempts: positiveInt('max-attempts', values['max-attempts'], 10),
      backoff: {
        baseMs: ms('backoff-base-ms', values['backoff-base-ms']),
        maxMs: ms('backoff-max-ms', values['backoff-max-ms']),
        jitterMs: ms('backoff-jitter-ms', values['backoff-jitter-ms']),
      },
      unorderedTopics: listFlag(values.unordered),
      deadLetterPolicy: policy,
    });
    const runner = pollRunner(dispatcher);
    if (metricsPort !== undefined)
      cleanups.push(await serveMetrics(dispatcher, db, metricsPort, values, log));
    if (pruneOlderThanMs !== undefined && !values.once) {
      const timer = setInterval(() => {
        try {
          const deleted = pruneSqliteOutbox(db, { olderThanMs: pruneOlderThanMs });
          log('info', 'retention run', { removed: deleted });
        } catch (error) {
          log('error', 'retention run failed', { error: (error as Error).message });
        }
      }, pruneIntervalMs);
      timer.unref();
      cleanups.push(() => clearInterval(timer));
      log('info', `retention: dispatched rows older than ${formatDuration(pruneOlderThanMs)}`);
    }
    logDispatcherEvents(runner, log);
    log('info', `poll dispatcher ${dispatcher.id} on SQLite ${db.name}`, {
      once: values.once,
      batchSize: positiveInt('batch-size', values['batch-size'], 200),
    });
    if (values.once) {
      const result = await dispatcher.drain();
      log('info', result.failed ? 'drained with failures' : 'drained', progress(result));
      return result.failed ? EXIT.failure : EXIT.ok;
    }
    dispatcher.start();
    await waitForSignal(log);
    log('info', 'stopping: finishing in-flight work');
    await dispatcher.stop();
    log('info', 'stopped', progress(dispatcher.stats()));
    return EXIT.ok;
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup();
    await publisher.close?.();
    db.close();
  }
}

async function serveMetrics(
  dispatcher: Dispatcher,
  db: Awaited<ReturnType<typeof openSqlite>>,
  port: number,
  values: { 'metrics-host': string; 'health-stall-ms'?: string },
  log: Log,
): Promise<() => Promise<void>> {
  // Loaded only when asked for: prom-client is an optional peer dependency.
  const { serveDispatcherMetrics } = await importPeer(
    'prom-client',
    '--metrics-port',
    () => import('../../metrics/serve-dispatcher-metrics.js'),
  );
  const served = await serveDispatcherMetrics({
    dispatcher,
    readStatus: () => readSqliteStatus(db, { lastErrors: 1 }),
    port,
    host: values['metrics-host'],
    healthStallMs: positiveInt('health-stall-ms', values['health-stall-ms'], 300_000),
  });
  log('info', `metrics on ${served.url}/metrics, health on ${served.url}/healthz`);
  return served.close;
}
