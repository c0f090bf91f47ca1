import type { Dispatcher } from '../dispatcher/dispatcher.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { startMetricsServer } from './metrics-server.js';
import {
  createOutboxMetrics,
  type OutboxMetrics,
  type OutboxMetricsOptions,
} from './outbox-metrics.js';

/** Options of {@link serveDispatcherMetrics}. */
export interface ServeDispatcherMetricsOptions {
  dispatcher: Dispatcher;
  /** Where the database gauges come from: a Postgres executor, or a status reader (SQLite). */
  executor?: SqlExecutor;
  readStatus?: OutboxMetricsOptions['readStatus'];
  schema?: string;
  /** Which engine's tables `executor` reads for the gauges. Default `'claims'`. */
  engine?: OutboxMetricsOptions['engine'];
  port: number;
  /** Default `127.0.0.1`. */
  host?: string;
  /** `/healthz` fails after this long without progress while work is due. Default 300 000. */
  healthStallMs?: number;
  gaugeIntervalMs?: number;
}

/**
 * Everything `outbox dispatch --metrics-port` needs in one call: metrics attached to the
 * dispatcher, the gauge refresh started, `/metrics` and `/healthz` served. `close()` undoes it.
 */
export async function serveDispatcherMetrics(
  options: ServeDispatcherMetricsOptions,
): Promise<{ url: string; metrics: OutboxMetrics; close(): Promise<void> }> {
  const metrics = createOutboxMetrics({
    ...(options.executor && { executor: options.executor }),
    ...(options.readStatus && { readStatus: options.readStatus }),
    schema: options.schema,
    ...(options.engine && { engine: options.engine }),
    healthStallMs: options.healthStallMs,
    gaugeIntervalMs: options.gaugeIntervalMs,
  });
  const detach = metrics.attach(options.dispatcher);
  metrics.start();
  try {
    const server = await startMetricsServer({
      port: options.port,
      host: options.host,
      registry: metrics.registry,
      health: metrics.health,
    });
    return {
      url: server.url,
      metrics,
      close: async () => {
        detach();
        metrics.stop();
        await server.close();
      },
    };
  } catch (error) {
    detach();
    metrics.stop();
    throw error;
  }
}
