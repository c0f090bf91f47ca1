import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import type { OutboxHealth } from './outbox-metrics.js';

/** Options of {@link startMetricsServer}. */
export interface MetricsServerOptions {
  /** TCP port; 0 picks a free one (see {@link MetricsServer.port}). */
  port: number;
  /**
   * Interface to bind. Default `127.0.0.1`: metrics describe your traffic, so exposing them is a
   * decision (`0.0.0.0` for a Prometheus on another host). SPEC §6.
   */
  host?: string;
  registry: Registry;
  /** Verdict behind `/healthz`; without it `/healthz` always answers 200. */
  health?: () => OutboxHealth;
}

/** A running metrics server. */
export interface MetricsServer {
  /** `http://host:port` */
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

/**
 * Serves `GET /metrics` (Prometheus text format) and `GET /healthz` (200 or 503 with a JSON
 * body saying why) on node:http. Nothing else: every other path is 404, every other method 405.
 *
 * @example
 * ```ts
 * const server = await startMetricsServer({ port: 9464, registry: metrics.registry, health: metrics.health });
 * // curl -s 127.0.0.1:9464/metrics | grep outbox_pending_messages
 * ```
 */
export async function startMetricsServer(options: MetricsServerOptions): Promise<MetricsServer> {
  const host = options.host ?? '127.0.0.1';
  const server: Server = createServer((request, response) => {
    const path = (request.url ?? '/').split('?')[0];
    if (path !== '/metrics' && path !== '/healthz') {
      response.writeHead(404, { 'content-type': 'text/plain' }).end('not found: try /metrics\n');
      return;
    }
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      response.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    if (path === '/healthz') {
      const health = options.health?.() ?? { ok: true, reason: 'ok' };
      response
        .writeHead(health.ok ? 200 : 503, { 'content-type': 'application/json' })
        .end(`${JSON.stringify(health)}\n`);
      return;
    }
    options.registry.metrics().then(
      (text) => response.writeHead(200, { 'content-type': options.registry.contentType }).end(text),
      (error: unknown) =>
        response
          .writeHead(500, { 'content-type': 'text/plain' })
          .end(
            `metrics collection failed: ${error instanceof Error ? error.message : String(error)}\n`,
          ),
    );
  });
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${shownHost}:${port}`,
    port,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}
