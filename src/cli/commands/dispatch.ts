import { parseFlags } from '../parse-flags.js';
import { waitForSignal } from '../dispatch/wait-for-signal.js';
import { createDispatcher, type Dispatcher } from '../../dispatcher/dispatcher.js';
import { DEFAULT_STATEMENT_TIMEOUT_MS, type ClaimShapeOption } from '../../dispatcher/options.js';
import { parseRateLimitFlag } from '../../dispatcher/rate-limits.js';
import { readDatabaseEngine } from '../../admin/database-engine.js';
import { assertSchemaCurrent } from '../../migrations/migrate.js';
import { createPublisherFromUrl } from '../../publishers/from-url.js';
import { importPeer } from '../../publishers/optional-peer.js';
import { fromPg } from '../../store/from-pg.js';
import { createPgPool } from '../../store/multi-host-pool.js';
import { redactUrl, resolveDatabaseUrl } from '../database.js';
import {
  COMMON_OPTIONS,
  nonNegativeNumber,
  portFlag,
  positiveInt,
  validateSchemaFlag,
} from '../flags.js';
import { formatDuration, parseDuration } from '../format/duration.js';
import {
  logNatsStream,
  natsPublisherOptions,
  parseNatsStreamFlags,
} from '../dispatch/nats-stream.js';
import { EXIT, UsageError } from '../usage-error.js';
import { dispatchHelp } from '../dispatch/help.js';
import { logDispatcherEvents, progress } from '../dispatch/event-log.js';
import {
  checkPublisherScheme,
  publisherFromConfig,
  shownPublisher,
} from '../dispatch/publisher-flags.js';
import { startDispatchRetention } from '../dispatch/retention.js';
import { listenWorks, parseListenUrl } from '../dispatch/listen-check.js';
import {
  loadWebhookSecrets,
  refuseSecretOnCommandLine,
  WEBHOOK_SECRET_ENV,
} from '../dispatch/webhook-secrets.js';
import {
  cdcRunner,
  connectionSettings,
  DEFAULT_CONNECT_TIMEOUT_MS,
  laneCdcWakeSource,
  listenWakeSource,
  pollRunner,
  type DispatchRunner,
} from '../dispatch/runners.js';
import {
  endPoolBounded,
  POOL_END_GRACE_MS,
  settleWithin,
  trackPoolConnections,
} from '../dispatch/pool-shutdown.js';
import { runFleet, type FleetRun } from '../dispatch/fleet.js';
import {
  laneRunner,
  parseEngineFlag,
  refuseLaneFlags,
  warnClaimEngineWaiting,
  warnOtherEngine,
} from '../dispatch/lanes.js';
import { checkGlob } from '../../fleet/glob.js';
import { createLogger, LOG_FORMAT_ENV, resolveLogFormat } from '../log.js';
import { startTracing } from '../telemetry.js';
import { packageVersion } from '../version.js';

export { dispatchHelp };

export async function dispatchCommand(argv: string[]): Promise<number> {
  refuseSecretOnCommandLine(argv);
  const { values, tokens } = parseFlags({
    args: argv,
    options: {
      ...COMMON_OPTIONS,
      engine: { type: 'string' },
      // Repeatable in fleet mode: one URL per server.
      'database-url': { type: 'string', multiple: true },
      databases: { type: 'string' },
      schemas: { type: 'string' },
      'discover-interval': { type: 'string' },
      'max-connections': { type: 'string' },
      'idle-poll-interval': { type: 'string' },
      publisher: { type: 'string' },
      config: { type: 'string' },
      once: { type: 'boolean', default: false },
      mode: { type: 'string', default: 'poll' },
      'no-listen': { type: 'boolean', default: false },
      'listen-url': { type: 'string' },
      'fallback-poll-ms': { type: 'string' },
      slot: { type: 'string' },
      publication: { type: 'string' },
      'sweep-interval-ms': { type: 'string' },
      'batch-size': { type: 'string' },
      'lease-ms': { type: 'string' },
      'poll-interval-ms': { type: 'string' },
      concurrency: { type: 'string' },
      'async-settle': { type: 'boolean', default: false },
      'async-claim': { type: 'boolean', default: false },
      'statement-timeout-ms': { type: 'string' },
      'connect-timeout-ms': { type: 'string' },
      'backoff-base-ms': { type: 'string' },
      'backoff-max-ms': { type: 'string' },
      'backoff-jitter-ms': { type: 'string' },
      'max-attempts': { type: 'string' },
      unordered: { type: 'string', multiple: true },
      'rate-limit': { type: 'string', multiple: true },
      'route-pause-after': { type: 'string' },
      'route-pause-max-ms': { type: 'string' },
      'dead-letter-policy': { type: 'string', default: 'hold' },
      'claim-shape': { type: 'string', default: 'auto' },
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
      'log-format': { type: 'string' },
    },
    strict: true,
    tokens: true,
  });
  if (values.help) {
    process.stdout.write(dispatchHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  const flag = parseEngineFlag(values.engine);
  if (flag === 'lanes') refuseLaneFlags(tokens);
  const log = createLogger(
    resolveLogFormat(values['log-format'], values.json, process.env[LOG_FORMAT_ENV]),
  );
  if (!values.publisher && !values.config)
    throw new UsageError(
      '--publisher URL or --config FILE is required, e.g. --publisher http://127.0.0.1:8080/outbox',
    );
  if (values.publisher && values.config)
    throw new UsageError('give --publisher or --config, not both');
  if (values.publisher) checkPublisherScheme(values.publisher);
  if (values.mode !== 'poll' && values.mode !== 'cdc')
    throw new UsageError(`--mode must be poll or cdc, got "${values.mode}"`);
  if (values.mode === 'cdc' && values.once)
    throw new UsageError('--mode cdc cannot be combined with --once (use poll mode for cron runs)');
  // LISTEN/NOTIFY is on by default for a long-running poll dispatcher; --once never waits.
  const useListen = values.mode === 'poll' && !values['no-listen'] && !values.once;
  const listenUrl = parseListenUrl(values['listen-url'], useListen);
  const policy = values['dead-letter-policy'];
  if (policy !== 'hold' && policy !== 'skip')
    throw new UsageError(`--dead-letter-policy must be hold or skip, got "${policy}"`);
  const shape = values['claim-shape'];
  if (shape !== 'auto' && shape !== 'heads-first' && shape !== 'runs-first')
    throw new UsageError(`--claim-shape must be auto, heads-first or runs-first, got "${shape}"`);
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
    asyncClaim: values['async-claim'],
    maxAttempts: positiveInt('max-attempts', values['max-attempts'], 10),
    backoff: {
      baseMs: nonNegativeNumber('backoff-base-ms', values['backoff-base-ms']),
      maxMs: nonNegativeNumber('backoff-max-ms', values['backoff-max-ms']),
      jitterMs: nonNegativeNumber('backoff-jitter-ms', values['backoff-jitter-ms']),
    },
    unorderedTopics: (values.unordered ?? [])
      .flatMap((v) => v.split(','))
      .map((v) => v.trim())
      .filter(Boolean),
    deadLetterPolicy: policy as 'hold' | 'skip',
    claimShape: shape as ClaimShapeOption,
    rateLimits: (values['rate-limit'] ?? []).map((v) => {
      try {
        return parseRateLimitFlag(v);
      } catch (error) {
        throw new UsageError((error as Error).message);
      }
    }),
    routePause: {
      afterFailures: positiveInt('route-pause-after', values['route-pause-after'], 5),
      maxMs: positiveInt('route-pause-max-ms', values['route-pause-max-ms'], 60_000),
    },
    statementTimeoutMs:
      nonNegativeNumber('statement-timeout-ms', values['statement-timeout-ms']) ??
      DEFAULT_STATEMENT_TIMEOUT_MS,
  };
  const connection = connectionSettings(
    positiveInt('connect-timeout-ms', values['connect-timeout-ms'], DEFAULT_CONNECT_TIMEOUT_MS),
  );
  const httpTimeoutMs =
    values['http-timeout-ms'] === undefined
      ? undefined
      : positiveInt('http-timeout-ms', values['http-timeout-ms'], 10_000);
  const metricsPort = portFlag('metrics-port', values['metrics-port']);
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
  const fleetMode = values.databases !== undefined || values.schemas !== undefined;
  const urlFlags = values['database-url'] ?? [];
  if (!fleetMode && urlFlags.length > 1)
    throw new UsageError(
      '--database-url is given more than once: several servers are served in fleet mode only (add --databases GLOB or --schemas GLOB)',
    );
  if (fleetMode)
    return runFleet({
      ...checkFleetFlags(values, useListen),
      urls:
        urlFlags.length > 0
          ? urlFlags.map((u) => resolveDatabaseUrl(u))
          : [resolveDatabaseUrl(undefined)],
      schema: values.schema,
      connectTimeoutMs: connection.connectionTimeoutMillis,
      // Each tenant by its own record unless told one engine (docs/fleet.md).
      ...(flag !== undefined && { engine: flag }),
      options,
      publisher: values.config
        ? await publisherFromConfig(values.config, webhookSecrets)
        : await createPublisherFromUrl(values.publisher!, {
            ...natsPublisherOptions(natsStream, log),
            ...(httpTimeoutMs !== undefined && { httpTimeoutMs }),
            ...(webhookSecrets && { httpSigningSecrets: webhookSecrets }),
          }),
      publisherLabel: values.config ? `routes from ${values.config}` : redactUrl(values.publisher!),
      ...(metricsPort !== undefined && {
        metrics: { port: metricsPort, host: values['metrics-host'] },
      }),
      ...(pruneOlderThanMs !== undefined && {
        retention: {
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
        },
      }),
      log,
      waitForSignal: () => waitForSignal(log),
    });
  const url = resolveDatabaseUrl(urlFlags[0]);
  // Before the pool and the publisher, so that their work is traced; undefined when off.
  const tracing = await startTracing(process.env, packageVersion());

  const pool = createPgPool(url, {
    ...connection,
    // +1 each for the metrics gauges and the retention session (held for a whole run).
    max:
      options.concurrency +
      2 +
      (values.mode === 'cdc' ? 1 : 0) +
      (metricsPort === undefined ? 0 : 1) +
      (pruneOlderThanMs === undefined ? 0 : 1),
    application_name: 'agent-outbox-dispatcher',
  });
  const openConnections = trackPoolConnections(pool);
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
    const recorded = await readDatabaseEngine(fromPg(pool), { schema: values.schema });
    const engine = flag ?? recorded;
    // Flags the lanes engine does not take, refused now that the record chose it (exit 2).
    if (flag === undefined && engine === 'lanes') refuseLaneFlags(tokens);
    if (engine !== recorded) warnOtherEngine(log, values.schema, engine, recorded);
    if (engine === 'lanes') await warnClaimEngineWaiting(fromPg(pool), values.schema, log);
    // Through a transaction pooler LISTEN succeeds and then hears nothing: check, and say so.
    let listen = useListen;
    if (useListen) {
      const noListenPollMs = positiveInt('poll-interval-ms', values['poll-interval-ms'], 1_000);
      listen = await listenWorks({
        listenUrl: listenUrl ?? url,
        flag: listenUrl === undefined ? '--database-url' : '--listen-url',
        notify: fromPg(pool),
        connection,
        pollIntervalMs: noListenPollMs,
        log,
      });
      if (!listen) options.pollIntervalMs = noListenPollMs;
    }
    const dispatcher: DispatchRunner =
      engine === 'lanes'
        ? await laneRunner({
            executor: fromPg(pool),
            schema: options.schema,
            leaseMs: options.leaseMs,
            maxAttempts: options.maxAttempts,
            backoff: options.backoff,
            deadLetterPolicy: options.deadLetterPolicy,
            unorderedTopics: options.unorderedTopics,
            rateLimits: options.rateLimits,
            routePause: options.routePause,
            statementTimeoutMs: options.statementTimeoutMs,
            concurrency: options.concurrency,
            publisher,
            batchSize: values['batch-size'] === undefined ? undefined : options.batchSize,
            // Its own default (200 ms) when it polls alone; the safety net's when it listens or
            // follows the WAL.
            pollIntervalMs:
              values.mode === 'cdc' && values['poll-interval-ms'] === undefined
                ? 5_000
                : listen || values['poll-interval-ms'] !== undefined
                  ? options.pollIntervalMs
                  : undefined,
            ...(listen && {
              wakeSource: listenWakeSource(listenUrl ?? url, connection, values.schema, log),
            }),
            ...(values.mode === 'cdc' && {
              wakeSource: await laneCdcWakeSource({
                executor: fromPg(pool),
                url,
                connection,
                schema: values.schema,
                slot: values.slot,
                publication: values.publication,
                log,
              }),
            }),
          })
        : values.mode === 'cdc'
          ? await cdcRunner({
              executor: fromPg(pool),
              publisher,
              options,
              url,
              connection,
              slot: values.slot,
              publication: values.publication,
              sweepIntervalMs,
              log,
            })
          : pollRunner(
              createDispatcher({
                engine: 'claims',
                executor: fromPg(pool),
                publisher,
                ...options,
                ...(listen && {
                  wakeSource: listenWakeSource(listenUrl ?? url, connection, values.schema, log),
                }),
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
        // The gauges read the tables of the engine dispatching.
        engine,
        port: metricsPort,
        host: values['metrics-host'],
        healthStallMs,
      });
      cleanups.push(served.close);
      dispatcher.onSlotLag?.((slot, lagBytes) => served.metrics.setCdcSlotLagBytes(slot, lagBytes));
      log('info', `metrics on ${served.url}/metrics, health on ${served.url}/healthz`);
    }
    if (pruneOlderThanMs !== undefined && !values.once) {
      const stopRetention = startDispatchRetention(
        pool,
        {
          schema: values.schema,
          olderThanMs: pruneOlderThanMs,
          archive: values['prune-archive'],
          ledgerOlderThan: values['prune-ledger-older-than'],
          interval: values['prune-interval'],
        },
        log,
      );
      cleanups.push(stopRetention);
      log('info', `retention: dispatched rows older than ${formatDuration(pruneOlderThanMs)}`);
    }
    logDispatcherEvents(dispatcher, log);
    log(
      'info',
      `${engine === 'lanes' ? 'lanes' : values.mode} dispatcher ${dispatcher.id} on ${redactUrl(url)} → ${values.config ? `routes from ${values.config}` : shownPublisher(values.publisher!)}`,
      {
        once: values.once,
        listen,
        batchSize: options.batchSize,
        leaseMs: options.leaseMs,
        // How many, never which: enough to tell a signed run from an unsigned one.
        ...(webhookSecrets && { webhookSigningSecrets: webhookSecrets.length }),
      },
    );
    if (tracing) log('info', tracing.description);
    await logNatsStream(publisher, log);

    if (values.once) {
      dispatcher.on('dispatcher:settle:success', ({ settled, spanContext }) => {
        if (settled > 0) log('info', 'batch settled', progress(dispatcher.stats()), spanContext);
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
    // Each step bounded: a retention run on a frozen connection has no statement timeout.
    const stepMs = (options.statementTimeoutMs || DEFAULT_STATEMENT_TIMEOUT_MS) + POOL_END_GRACE_MS;
    for (const cleanup of cleanups.reverse()) await settleWithin(cleanup(), stepMs);
    await settleWithin(publisher.close?.() ?? Promise.resolve(), stepMs);
    // Bounded: a connection a partition froze never finishes a graceful end (pool-shutdown.ts).
    await endPoolBounded(pool, openConnections);
    // Last: the spans of the shutdown itself are exported too.
    await tracing?.shutdown();
  }
}

/** The fleet flags, checked against the rest (fleet mode polls; see docs/fleet.md). */
function checkFleetFlags(
  values: {
    databases?: string;
    schemas?: string;
    mode: string;
    once: boolean;
    'no-listen': boolean;
    'discover-interval'?: string;
    'max-connections'?: string;
    'idle-poll-interval'?: string;
  },
  useListen: boolean,
): Pick<
  FleetRun,
  'databases' | 'schemas' | 'maxConnections' | 'discoverIntervalMs' | 'idlePollMs'
> {
  if (values.databases !== undefined && values.schemas !== undefined)
    throw new UsageError(
      'give --databases GLOB (a database per tenant) or --schemas GLOB (a schema per tenant), not both',
    );
  if (values.mode === 'cdc')
    throw new UsageError(
      '--mode cdc cannot serve a fleet: it needs a replication slot per database. Fleet mode polls, woken by one activity read per server (docs/fleet.md)',
    );
  if (values.once)
    throw new UsageError(
      '--once cannot be combined with --databases/--schemas: run `outbox dispatch --once` per database',
    );
  void useListen; // LISTEN needs a connection per database: fleet mode never uses it.
  for (const [flag, glob] of [
    ['databases', values.databases],
    ['schemas', values.schemas],
  ] as const) {
    if (glob === undefined) continue;
    try {
      checkGlob(flag, glob);
    } catch (error) {
      throw new UsageError(`--${(error as Error).message}`);
    }
  }
  const maxConnections = positiveInt('max-connections', values['max-connections'], 10);
  if (maxConnections < 2)
    throw new UsageError(
      `--max-connections must be at least 2 (one control connection per server, one for the database served), got ${maxConnections}`,
    );
  return {
    databases: values.databases,
    schemas: values.schemas,
    maxConnections,
    discoverIntervalMs:
      values['discover-interval'] === undefined
        ? 30_000
        : parseDuration('discover-interval', values['discover-interval']),
    idlePollMs:
      values['idle-poll-interval'] === undefined
        ? 60_000
        : parseDuration('idle-poll-interval', values['idle-poll-interval']),
  };
}
