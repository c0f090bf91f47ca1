import type { OutboxStatus } from '../../admin/status.js';
import { waitForSignal } from '../dispatch/wait-for-signal.js';
import type { Dispatcher } from '../../dispatcher/dispatcher.js';
import type { StoreDispatcherOptions } from '../../stores/store-dispatcher-options.js';
import { createPublisherFromUrl } from '../../publishers/from-url.js';
import { importPeer } from '../../publishers/optional-peer.js';
import { listFlag, nonNegativeNumber, portFlag, positiveInt } from '../flags.js';
import { formatDuration, parseDuration } from '../format/duration.js';
import { createLogger, LOG_FORMAT_ENV, resolveLogFormat, type Log } from '../log.js';
import { parseFlags } from '../parse-flags.js';
import { EXIT, UsageError } from '../usage-error.js';
import { logDispatcherEvents, progress } from '../dispatch/event-log.js';
import { checkPublisherScheme, publisherFromConfig } from '../dispatch/publisher-flags.js';
import { pollRunner } from '../dispatch/runners.js';
import {
  loadWebhookSecrets,
  refuseSecretOnCommandLine,
  WEBHOOK_SECRET_ENV,
} from '../dispatch/webhook-secrets.js';

/** A store opened for `outbox dispatch`: what the command needs of it, and nothing more. */
export interface OpenedStore {
  /** For the start-up log line, e.g. `MySQL 127.0.0.1:3306/app`. */
  label: string;
  assertSchemaCurrent(): Promise<void> | void;
  createDispatcher(options: StoreDispatcherOptions): Dispatcher;
  readStatus(): Promise<OutboxStatus> | OutboxStatus;
  /** Deletes dispatched messages older than `olderThanMs`; how many. */
  prune(olderThanMs: number): Promise<number> | number;
  close(): Promise<void> | void;
}

/** The flags every store's dispatch command reads, as `parseFlags` options. */
const COMMON_FLAGS = {
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
  'max-attempts': { type: 'string' },
  'backoff-base-ms': { type: 'string' },
  'backoff-max-ms': { type: 'string' },
  'backoff-jitter-ms': { type: 'string' },
  unordered: { type: 'string', multiple: true },
  'dead-letter-policy': { type: 'string', default: 'hold' },
  'http-timeout-ms': { type: 'string' },
  'webhook-secret-file': { type: 'string' },
  'metrics-port': { type: 'string' },
  'metrics-host': { type: 'string', default: '127.0.0.1' },
  'health-stall-ms': { type: 'string' },
  'prune-older-than': { type: 'string' },
  'prune-interval': { type: 'string' },
  'log-format': { type: 'string' },
} as const;

/** The help lines of {@link COMMON_FLAGS}, for a store's help text. */
export const STORE_DISPATCH_OPTIONS_HELP = `  --publisher URL          where to publish (http(s)://, nats://, amqp://, redis://, memory:)
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
  --http-timeout-ms N      webhook request timeout
  --webhook-secret-file F  sign webhook deliveries (or $${WEBHOOK_SECRET_ENV})
  --metrics-port N         serve /metrics and /healthz on 127.0.0.1 (--metrics-host to change)
  --prune-older-than DUR   delete dispatched messages older than DUR every --prune-interval (1h)
  --log-format text|json
`;

/**
 * `outbox dispatch` on a store other than Postgres (SQLite, MySQL): the flags every store
 * shares, parsed and turned into a polling dispatcher over `open`'s store. `extraFlags` are the
 * store's own (passed to `open` with the rest of the parsed values).
 */
export async function storeDispatchCommand(
  argv: string[],
  store: {
    help: string;
    /** The store's own string flags, e.g. `busy-timeout-ms`. */
    extraFlags: readonly string[];
    open(values: Record<string, string | undefined>): Promise<OpenedStore>;
  },
): Promise<number> {
  refuseSecretOnCommandLine(argv);
  const extra = Object.fromEntries(store.extraFlags.map((flag) => [flag, { type: 'string' }]));
  const { values: parsed } = parseFlags({
    args: argv,
    options: { ...COMMON_FLAGS, ...extra } as typeof COMMON_FLAGS,
    strict: true,
  });
  const values = parsed as typeof parsed & Record<string, string | undefined>;
  if (values.help) {
    process.stdout.write(store.help);
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
  const metricsPort = portFlag('metrics-port', values['metrics-port']);
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
  const batchSize = positiveInt('batch-size', values['batch-size'], 200);
  // Every flag is read before the store is opened: a typo must not create a SQLite file.
  const backoff = {
    baseMs: nonNegativeNumber('backoff-base-ms', values['backoff-base-ms']),
    maxMs: nonNegativeNumber('backoff-max-ms', values['backoff-max-ms']),
    jitterMs: nonNegativeNumber('backoff-jitter-ms', values['backoff-jitter-ms']),
  };
  const leaseMs = positiveInt('lease-ms', values['lease-ms'], 30_000);
  const pollIntervalMs = positiveInt('poll-interval-ms', values['poll-interval-ms'], 1_000);
  const concurrency = positiveInt('concurrency', values.concurrency, 1);
  const maxAttempts = positiveInt('max-attempts', values['max-attempts'], 10);

  const opened = await store.open(values);
  const cleanups: (() => Promise<void> | void)[] = [() => opened.close()];
  try {
    const publisher = values.config
      ? await publisherFromConfig(values.config, webhookSecrets)
      : await createPublisherFromUrl(values.publisher!, {
          ...(httpTimeoutMs !== undefined && { httpTimeoutMs }),
          ...(webhookSecrets && { httpSigningSecrets: webhookSecrets }),
        });
    cleanups.push(async () => {
      await publisher.close?.();
    });
    await opened.assertSchemaCurrent();
    const dispatcher = opened.createDispatcher({
      publisher,
      batchSize,
      leaseMs,
      pollIntervalMs,
      concurrency,
      maxAttempts,
      backoff,
      unorderedTopics: listFlag(values.unordered),
      deadLetterPolicy: policy,
    });
    const runner = pollRunner(dispatcher);
    if (metricsPort !== undefined)
      cleanups.push(await serveMetrics(dispatcher, opened, metricsPort, values, log));
    if (pruneOlderThanMs !== undefined && !values.once) {
      const timer = setInterval(() => {
        void (async () => {
          try {
            const deleted = await opened.prune(pruneOlderThanMs);
            log('info', 'retention run', { removed: deleted });
          } catch (error) {
            log('error', 'retention run failed', { error: (error as Error).message });
          }
        })();
      }, pruneIntervalMs);
      timer.unref();
      cleanups.push(() => clearInterval(timer));
      log('info', `retention: dispatched rows older than ${formatDuration(pruneOlderThanMs)}`);
    }
    logDispatcherEvents(runner, log);
    log('info', `poll dispatcher ${dispatcher.id} on ${opened.label}`, {
      once: values.once,
      batchSize,
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
  }
}

async function serveMetrics(
  dispatcher: Dispatcher,
  opened: OpenedStore,
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
    readStatus: async () => opened.readStatus(),
    port,
    host: values['metrics-host'],
    healthStallMs: positiveInt('health-stall-ms', values['health-stall-ms'], 300_000),
  });
  log('info', `metrics on ${served.url}/metrics, health on ${served.url}/healthz`);
  return served.close;
}
