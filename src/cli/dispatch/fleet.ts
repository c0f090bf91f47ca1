import { createFleetDispatcher, type FleetDispatcher } from '../../fleet/fleet-dispatcher.js';
import type { FleetEngine } from '../../fleet/target-engine.js';
import type { DispatcherOptions } from '../../dispatcher/options.js';
import { importPeer } from '../../publishers/optional-peer.js';
import type { Publisher } from '../../publishers/publisher.js';
import { startMetricsServer } from '../../metrics/metrics-server.js';
import { redactUrl } from '../database.js';
import { formatDuration } from '../format/duration.js';
import type { Log } from '../log.js';
import { EXIT } from '../usage-error.js';
import { progress } from './event-log.js';

/** What `outbox dispatch --databases/--schemas` was given, parsed. */
export interface FleetRun {
  urls: string[];
  databases: string | undefined;
  schemas: string | undefined;
  schema: string;
  maxConnections: number;
  discoverIntervalMs: number;
  idlePollMs: number;
  connectTimeoutMs: number;
  /** Undefined: each tenant by its schema's record. */
  engine?: FleetEngine;
  options: Omit<DispatcherOptions, 'publisher' | 'executor'>;
  publisher: Publisher;
  publisherLabel: string;
  metrics?: { port: number; host: string };
  retention?: {
    olderThanMs: number;
    archive: boolean;
    ledgerOlderThanMs: number | null;
    intervalMs: number;
  };
  log: Log;
  waitForSignal: () => Promise<void>;
}

/** Runs the fleet until a signal: the `outbox dispatch` of many databases (issue 40). */
export async function runFleet(run: FleetRun): Promise<number> {
  const { log } = run;
  const fleet = createFleetDispatcher({
    ...run.options,
    publisher: run.publisher,
    servers: run.urls,
    ...(run.databases !== undefined
      ? { databases: run.databases, schema: run.schema }
      : { schemas: run.schemas }),
    maxConnections: run.maxConnections,
    discoverIntervalMs: run.discoverIntervalMs,
    idlePollMs: run.idlePollMs,
    connectTimeoutMs: run.connectTimeoutMs,
    engine: run.engine,
    statusIntervalMs: run.metrics ? 15_000 : 0,
    ...(run.retention && { retention: run.retention }),
  });
  logFleetEvents(fleet, log);
  const cleanups: (() => Promise<void>)[] = [];
  try {
    if (run.metrics) {
      const { createFleetMetrics } = await importPeer(
        'prom-client',
        '--metrics-port',
        () => import('../../metrics/fleet-metrics.js'),
      );
      const metrics = createFleetMetrics();
      const detach = metrics.attach(fleet);
      cleanups.push(async () => detach());
      const server = await startMetricsServer({
        port: run.metrics.port,
        host: run.metrics.host,
        registry: metrics.registry,
        health: metrics.health,
      });
      cleanups.push(server.close);
      log('info', `metrics on ${server.url}/metrics, health on ${server.url}/healthz`);
    }
    await fleet.start();
    log(
      'info',
      `${run.engine === 'lanes' ? 'lanes ' : run.engine === 'claims' ? 'claims ' : ''}fleet dispatcher ${fleet.member}: ${run.databases !== undefined ? `databases ${run.databases}` : `schemas ${run.schemas}`}${run.engine === undefined ? ', each on the engine it records,' : ''} on ${run.urls.map(redactUrl).join(', ')} → ${run.publisherLabel}`,
      {
        maxConnections: run.maxConnections,
        discoverInterval: formatDuration(run.discoverIntervalMs),
        batchSize: run.options.batchSize,
        leaseMs: run.options.leaseMs,
        listen: false,
        ...(run.retention && { retention: formatDuration(run.retention.olderThanMs) }),
      },
    );
    const summary = setInterval(() => {
      const servers = fleet.servers();
      log('info', 'progress', {
        ...progress(fleet.stats()),
        databases: servers.reduce((a, s) => a + s.discovered, 0),
        owned: servers.reduce((a, s) => a + s.owned, 0),
        connections: servers.reduce((a, s) => a + s.connections, 0),
      });
    }, 10_000);
    summary.unref();
    await run.waitForSignal();
    log('info', 'stopping: finishing in-flight work in every database');
    clearInterval(summary);
    await fleet.stop();
    log('info', 'stopped', progress(fleet.stats()));
    return EXIT.ok;
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
    await run.publisher.close?.();
  }
}

function logFleetEvents(fleet: FleetDispatcher, log: Log): void {
  fleet.on('fleet:target:discovered', ({ target }) =>
    log('info', 'database found', { database: target.name }),
  );
  fleet.on('fleet:target:gone', ({ target }) =>
    log('info', 'database gone; let go', { database: target.name }),
  );
  fleet.on('fleet:target:released', ({ target, reason }) =>
    log('info', 'database handed over', { database: target.name, reason }),
  );
  fleet.on('fleet:members', ({ server, members, owned, targets, changed }) => {
    if (changed) log('info', 'fleet', { server, members, owned, databases: targets });
  });
  fleet.on('fleet:target:other-engine', ({ target, engine, recordedEngine }) =>
    log(
      'warn',
      `database records the ${recordedEngine} engine (outbox engine): its writers without an engine option write tables this ${engine} fleet does not read; run a ${recordedEngine} fleet on it too (--engine ${recordedEngine})`,
      { database: target.name, engine, recordedEngine },
    ),
  );
  fleet.on('fleet:target:failure', ({ target, error, retryInMs }) =>
    log('error', 'database failed; retrying', {
      database: target.name,
      error: error.message,
      retryInMs,
    }),
  );
  fleet.on('fleet:control:failure', ({ server, error }) =>
    log('error', 'control connection failed (discovery, activity, ownership)', {
      server,
      error: error.message,
    }),
  );
  fleet.on('fleet:settle:failure', ({ target, error, messages }) =>
    log('error', 'settle failed; messages will be published again after the lease expires', {
      database: target.name,
      error: error.message,
      messages,
    }),
  );
  fleet.on('fleet:dead-letter', ({ target, message, error }) =>
    log('warn', 'dead-lettered', {
      database: target.name,
      id: message.id,
      topic: message.topic,
      aggregateId: message.aggregateId,
      attempts: message.attempts,
      error,
    }),
  );
  fleet.on('fleet:route:paused', ({ target, route }) =>
    log('warn', 'route paused: its destination is down; messages wait without attempts', {
      database: target.name,
      route,
    }),
  );
  fleet.on('fleet:retention:run', ({ target, removed, durationMs }) =>
    log('info', 'retention run', { database: target.name, removed, durationMs }),
  );
}
