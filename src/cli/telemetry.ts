import { MissingPeerDependencyError, importPeer } from '../publishers/optional-peer.js';
import { UsageError } from './usage-error.js';

/**
 * Tracing for the long-running commands (`dispatch`, `ui`), configured the way every
 * OpenTelemetry-instrumented service is: by the standard `OTEL_*` environment variables.
 *
 * The SDK packages are optional peer dependencies of agent-outbox (dev dependencies here) and
 * are imported only when tracing is asked for, so a run without it loads and starts nothing. The
 * library itself never imports them: it records spans through `@opentelemetry/api`, which is a
 * no-op until this (or the application) registers an SDK.
 */

/** The packages `outbox dispatch` needs for tracing, for the install hint. */
export const TRACING_PACKAGES = [
  '@opentelemetry/sdk-trace-node',
  '@opentelemetry/resources',
  '@opentelemetry/exporter-trace-otlp-proto',
] as const;

/** Service name when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` gives one. */
export const DEFAULT_SERVICE_NAME = 'agent-outbox';

/** What the environment asks for; see {@link tracingRequest}. */
export interface TracingRequest {
  exporter: 'otlp' | 'console';
  /** OTLP only. */
  protocol: 'http/protobuf' | 'http/json';
  /** OTLP only: where spans go, as the exporter will resolve it. */
  endpoint: string;
  /** Why tracing is on, for the log line. */
  reason: string;
  /**
   * `OUTBOX_OTEL_ASYNC_CONTEXT=true`: register the SDK's AsyncLocalStorage context manager, so
   * the active context follows `await`s (for instrumentations loaded with `NODE_OPTIONS`, whose
   * spans should nest under the batch's). Off by default: see {@link ASYNC_CONTEXT_ENV}.
   */
  asyncContext: boolean;
}

/**
 * The variable that turns on an async context manager (see {@link TracingRequest.asyncContext}).
 *
 * Why none by default: the dispatcher names every span's parent, and every log line's trace,
 * explicitly (dispatch-spans.ts, the settle's events), so nothing of ours needs the active
 * context to follow an `await`. On Node 20 an AsyncLocalStorage that has been entered once
 * makes every promise and async resource of the process pay a hook: measured with `npm run
 * bench -- --only tracing` (2026-12-07, lanes engine, NATS JetStream), 27 µs of CPU a message
 * for tracing with it against 19 without, `tracing_overhead` 0.79 against 0.86.
 */
export const ASYNC_CONTEXT_ENV = 'OUTBOX_OTEL_ASYNC_CONTEXT';

/**
 * Reads the environment: undefined when tracing is off. On when `OTEL_TRACES_EXPORTER` names
 * `otlp` (or `console`), or is unset and an OTLP endpoint is (`OTEL_EXPORTER_OTLP_ENDPOINT`,
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`). Off with `OTEL_SDK_DISABLED=true`,
 * `OTEL_TRACES_EXPORTER=none`, or none of these set — the specification's default exporter is
 * `otlp`, but a CLI that opened connections to localhost:4318 because nothing was configured
 * would surprise more than it helps. `grpc` and other exporters are usage errors (exit 2).
 */
export function tracingRequest(env: NodeJS.ProcessEnv): TracingRequest | undefined {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return undefined;
  const named = (env.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((name) => name.trim().toLowerCase())
    .filter(Boolean);
  if (named.includes('none')) return undefined;
  const endpointVar = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
    ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'
    : env.OTEL_EXPORTER_OTLP_ENDPOINT
      ? 'OTEL_EXPORTER_OTLP_ENDPOINT'
      : undefined;
  if (named.length === 0 && !endpointVar) return undefined;
  const unsupported = named.filter((name) => name !== 'otlp' && name !== 'console');
  if (unsupported.length > 0 || named.length > 1)
    throw new UsageError(
      `OTEL_TRACES_EXPORTER=${env.OTEL_TRACES_EXPORTER}: outbox exports with one of otlp, console or none`,
    );
  const exporter = (named[0] ?? 'otlp') as 'otlp' | 'console';
  const protocol = (
    env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ??
    env.OTEL_EXPORTER_OTLP_PROTOCOL ??
    'http/protobuf'
  ).trim();
  if (exporter === 'otlp' && protocol !== 'http/protobuf' && protocol !== 'http/json')
    throw new UsageError(
      `OTEL_EXPORTER_OTLP_PROTOCOL=${protocol}: outbox exports OTLP over http/protobuf or http/json (not grpc)`,
    );
  const asyncContext = (env[ASYNC_CONTEXT_ENV] ?? '').trim().toLowerCase();
  if (!['', 'true', 'false', '1', '0'].includes(asyncContext))
    throw new UsageError(
      `${ASYNC_CONTEXT_ENV}=${env[ASYNC_CONTEXT_ENV]}: give true (register an async context manager) or false`,
    );
  return {
    asyncContext: asyncContext === 'true' || asyncContext === '1',
    exporter,
    protocol: protocol as TracingRequest['protocol'],
    endpoint: tracesEndpoint(env),
    reason: named.length > 0 ? `OTEL_TRACES_EXPORTER=${named[0]}` : `${endpointVar} is set`,
  };
}

/** The OTLP/HTTP traces URL the exporters derive from the environment (OTLP exporter spec). */
function tracesEndpoint(env: NodeJS.ProcessEnv): string {
  const specific = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  if (specific) return specific;
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || 'http://localhost:4318';
  return `${base.replace(/\/+$/, '')}/v1/traces`;
}

/** A running tracing setup. */
export interface CliTracing {
  /** One line for the startup log. */
  readonly description: string;
  /** Exports what is buffered and stops; resolves within `timeoutMs` even if the collector is down. */
  shutdown(timeoutMs?: number): Promise<void>;
}

/**
 * Registers the OpenTelemetry SDK globally when the environment asks for tracing (see
 * {@link tracingRequest}), else does nothing and returns undefined. The SDK reads the rest of
 * the standard variables itself: `OTEL_EXPORTER_OTLP_HEADERS`, `_TIMEOUT`, `_COMPRESSION`,
 * `OTEL_TRACES_SAMPLER`(`_ARG`), `OTEL_BSP_*`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`.
 */
export async function startTracing(
  env: NodeJS.ProcessEnv,
  serviceVersion: string,
): Promise<CliTracing | undefined> {
  const request = tracingRequest(env);
  if (!request) return undefined;
  try {
    return await register(request, serviceVersion);
  } catch (error) {
    if (error instanceof MissingPeerDependencyError) {
      throw new Error(
        `tracing is on (${request.reason}) but ${error.packageName} is not installed: npm install ${TRACING_PACKAGES.join(' ')}` +
          (request.protocol === 'http/json' ? ' @opentelemetry/exporter-trace-otlp-http' : ''),
        { cause: error },
      );
    }
    throw error;
  }
}

async function register(request: TracingRequest, serviceVersion: string): Promise<CliTracing> {
  const peer = <T>(name: string, load: () => Promise<T>) => importPeer(name, 'tracing', load);
  const [sdk, resources] = await Promise.all([
    peer('@opentelemetry/sdk-trace-node', () => import('@opentelemetry/sdk-trace-node')),
    peer('@opentelemetry/resources', () => import('@opentelemetry/resources')),
  ]);
  let exporter;
  if (request.exporter === 'console') exporter = new sdk.ConsoleSpanExporter();
  else if (request.protocol === 'http/json') {
    const { OTLPTraceExporter } = await peer(
      '@opentelemetry/exporter-trace-otlp-http',
      () => import('@opentelemetry/exporter-trace-otlp-http'),
    );
    exporter = new OTLPTraceExporter();
  } else {
    const { OTLPTraceExporter } = await peer(
      '@opentelemetry/exporter-trace-otlp-proto',
      () => import('@opentelemetry/exporter-trace-otlp-proto'),
    );
    exporter = new OTLPTraceExporter();
  }
  // Later merges win: our defaults, then OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME. Not the
  // process detector: it would export the command line, --database-url and its password included.
  const resource = resources
    .defaultResource()
    .merge(
      resources.resourceFromAttributes({
        'service.name': DEFAULT_SERVICE_NAME,
        'service.version': serviceVersion,
      }),
    )
    .merge(
      resources.detectResources({ detectors: [resources.hostDetector, resources.envDetector] }),
    );
  const provider = new sdk.NodeTracerProvider({
    resource,
    spanProcessors: [new sdk.BatchSpanProcessor(exporter)],
  });
  // Global tracer provider and W3C trace context propagator; a context manager only when asked
  // for (ASYNC_CONTEXT_ENV says why: null registers none, undefined the AsyncLocalStorage one).
  provider.register({ contextManager: request.asyncContext ? undefined : null });
  await resource.waitForAsyncAttributes?.();
  const serviceName = String(resource.attributes['service.name'] ?? DEFAULT_SERVICE_NAME);
  return {
    description:
      request.exporter === 'console'
        ? `tracing: service ${serviceName}, spans to the console (${request.reason})`
        : `tracing: service ${serviceName}, OTLP ${request.protocol} to ${request.endpoint} (${request.reason})`,
    shutdown: async (timeoutMs = 5_000) => {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        provider.shutdown().catch(() => undefined),
        new Promise((resolve) => (timer = setTimeout(resolve, timeoutMs))),
      ]);
      clearTimeout(timer);
    },
  };
}
