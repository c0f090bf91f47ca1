import { readFile } from 'node:fs/promises';
import { extname, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createPublisherFromUrl, type PublisherFromUrlOptions } from './from-url.js';
import { circuitBreaker } from './middleware/circuit-breaker.js';
import { timeout } from './middleware/timeout.js';
import { withMiddleware, type Publisher, type PublisherMiddleware } from './publisher.js';
import { Router } from './router.js';
import { compileTopicPattern } from './topic-pattern.js';

/**
 * Which publishers a dispatcher uses, as plain data (a JSON file or the default export of
 * `outbox.config.ts`):
 *
 * ```json
 * {
 *   "routes": [
 *     { "pattern": "mail.*", "publisher": "nats://127.0.0.1:4222" },
 *     { "pattern": "payment.**", "publisher": "amqp://guest:guest@127.0.0.1:5672", "destination": "payments" }
 *   ],
 *   "fallback": "http://127.0.0.1:8080/outbox",
 *   "options": { "natsStream": "OUTBOX" },
 *   "middleware": { "timeoutMs": 15000, "circuitBreaker": { "failureThreshold": 5, "cooldownMs": 30000 } }
 * }
 * ```
 */
export interface PublisherConfig {
  /** Routes, first match wins (see `Router`). Omit for a single publisher (`fallback`). */
  routes?: { pattern: string; publisher: string; destination?: string }[];
  /** Publisher URL for unmatched topics; without it they are dead-lettered (`permanent`). */
  fallback?: string;
  /** Scheme options passed to `createPublisherFromUrl`. */
  options?: PublisherFromUrlOptions;
  /** Middleware wrapped around EACH broker's publisher (one breaker per broker). */
  middleware?: {
    timeoutMs?: number;
    circuitBreaker?: boolean | { failureThreshold?: number; cooldownMs?: number };
  };
}

/** Thrown for a config that is not a valid {@link PublisherConfig}, naming the bad field. */
export class PublisherConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PublisherConfigError';
  }
}

/** Checks untrusted input (parsed JSON, a module's default export) and returns it typed. */
export function parsePublisherConfig(input: unknown): PublisherConfig {
  const fail = (message: string): never => {
    throw new PublisherConfigError(`publisher config: ${message}`);
  };
  if (typeof input !== 'object' || input === null || Array.isArray(input))
    fail('must be an object');
  const config = input as Record<string, unknown>;
  for (const key of Object.keys(config)) {
    if (!['routes', 'fallback', 'options', 'middleware'].includes(key))
      fail(`unknown key "${key}"`);
  }
  if (config.routes !== undefined && !Array.isArray(config.routes))
    fail('"routes" must be an array');
  const routes = (config.routes ?? []) as unknown[];
  routes.forEach((route, i) => {
    if (typeof route !== 'object' || route === null) fail(`routes[${i}] must be an object`);
    const r = route as Record<string, unknown>;
    if (typeof r.pattern !== 'string') fail(`routes[${i}].pattern must be a string`);
    try {
      compileTopicPattern(r.pattern as string);
    } catch (error) {
      fail(`routes[${i}].pattern: ${(error as Error).message}`);
    }
    if (typeof r.publisher !== 'string' || r.publisher.length === 0) {
      fail(`routes[${i}].publisher must be a publisher URL`);
    }
    if (r.destination !== undefined && typeof r.destination !== 'string') {
      fail(`routes[${i}].destination must be a string`);
    }
  });
  if (config.fallback !== undefined && typeof config.fallback !== 'string') {
    fail('"fallback" must be a publisher URL');
  }
  if (routes.length === 0 && config.fallback === undefined) {
    fail('needs "routes" or a "fallback" publisher');
  }
  for (const key of ['options', 'middleware'] as const) {
    const value = config[key];
    if (
      value !== undefined &&
      (typeof value !== 'object' || value === null || Array.isArray(value))
    ) {
      fail(`"${key}" must be an object`);
    }
  }
  return config as PublisherConfig;
}

/**
 * Builds the dispatcher's publisher from a config: one publisher per distinct URL (routes to the
 * same broker share its connection), each wrapped in the configured middleware, combined by a
 * `Router` — or the fallback publisher alone when there are no routes.
 */
export async function createPublisherFromConfig(
  input: PublisherConfig | unknown,
): Promise<Publisher> {
  const config = parsePublisherConfig(input);
  const byUrl = new Map<string, Publisher>();
  const publisherFor = async (url: string): Promise<Publisher> => {
    let publisher = byUrl.get(url);
    if (!publisher) {
      publisher = withMiddleware(
        await createPublisherFromUrl(url, config.options),
        ...middlewareOf(config),
      );
      byUrl.set(url, publisher);
    }
    return publisher;
  };
  const fallback = config.fallback === undefined ? undefined : await publisherFor(config.fallback);
  const routes = config.routes ?? [];
  if (routes.length === 0 && fallback) return fallback;
  const resolved = [];
  for (const route of routes) {
    resolved.push({
      pattern: route.pattern,
      publisher: await publisherFor(route.publisher),
      ...(route.destination !== undefined && { destination: route.destination }),
    });
  }
  return new Router({ routes: resolved, ...(fallback && { fallback }) });
}

function middlewareOf(config: PublisherConfig): PublisherMiddleware[] {
  const middleware: PublisherMiddleware[] = [];
  const breaker = config.middleware?.circuitBreaker;
  if (breaker) middleware.push(circuitBreaker(breaker === true ? {} : breaker));
  if (config.middleware?.timeoutMs !== undefined)
    middleware.push(timeout(config.middleware.timeoutMs));
  return middleware;
}

/**
 * Reads a config file: `.json` is parsed; anything else (`.js`, `.mjs`, or `.ts` when running
 * under a TypeScript loader such as tsx) is imported and its default export used.
 */
export async function loadPublisherConfig(path: string): Promise<PublisherConfig> {
  const absolute = resolve(path);
  if (extname(absolute) === '.json') {
    const text = await readFile(absolute, 'utf8');
    try {
      return parsePublisherConfig(JSON.parse(text));
    } catch (error) {
      if (error instanceof PublisherConfigError) throw error;
      throw new PublisherConfigError(`publisher config ${path}: ${(error as Error).message}`);
    }
  }
  const module = (await import(pathToFileURL(absolute).href)) as { default?: unknown };
  return parsePublisherConfig(module.default);
}
