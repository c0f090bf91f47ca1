import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Miniflare } from 'miniflare';
import { migrateD1, type D1Db } from '../../../src/cloudflare/index.js';
import { bundleExampleWorker } from './worker-bundle.js';

const exampleSql = fileURLToPath(
  new URL('../../../examples/cloudflare/migrations/0002_orders_example.sql', import.meta.url),
);

/** Queue name used by the example Worker in tests. */
export const QUEUE_NAME = 'agent-outbox-orders';

/** A running example Worker on Miniflare with a migrated D1. */
export interface ExampleWorker {
  mf: Miniflare;
  /** The Worker's D1, driven from Node (it satisfies the library's `D1Db`). */
  db: D1Db;
  /** Runs the Worker's `scheduled()` handler and waits for it. */
  scheduled(): Promise<void>;
  /** Delivers raw bodies to the Worker's `queue()` handler directly, bypassing the queue. */
  deliver(
    messages: { id: string; body: unknown; attempts?: number }[],
  ): Promise<{ explicitAcks: string[]; retryMessages: { msgId: string; delaySeconds?: number }[] }>;
  /** POSTs to the Worker. */
  post(path: string, body: unknown, headers?: Record<string, string>): Promise<Response>;
  dispose(): Promise<void>;
}

/** Splits the example's SQL file into statements (it has no `;` inside statements). */
function statements(sql: string): string[] {
  return sql
    .split(/;\s*$/m)
    .map((s) => s.replace(/^\s*--.*$/gm, '').trim())
    .filter((s) => s.length > 0);
}

/** Which Worker {@link startExampleWorker} runs, and whether it binds a dispatcher object. */
export interface WorkerSetup {
  /** Entry point, from the repository root. Default: the example Worker. */
  entry?: string;
  /**
   * Exported class to bind as `OUTBOX_DISPATCHER` (the Durable Object dispatcher). Default none:
   * without the binding the example Worker dispatches from its Cron Trigger only.
   */
  dispatcherClass?: string;
}

/**
 * Starts the example Worker once (per test file: start-up takes seconds). The queue consumer is
 * live with no batch wait, so messages the dispatchers send are consumed in the background; tests
 * that need precise control call `deliver()` instead.
 */
export async function startExampleWorker(
  vars: Record<string, string> = {},
  setup: WorkerSetup = {},
): Promise<ExampleWorker> {
  const { script } = await bundleExampleWorker(setup.entry);
  const mf = new Miniflare({
    modules: true,
    script,
    compatibilityDate: '2025-01-01',
    compatibilityFlags: ['nodejs_compat'],
    d1Databases: ['DB'],
    ...(setup.dispatcherClass
      ? {
          durableObjects: {
            OUTBOX_DISPATCHER: { className: setup.dispatcherClass, useSQLite: true },
          },
        }
      : {}),
    queueProducers: { QUEUE: QUEUE_NAME },
    queueConsumers: { [QUEUE_NAME]: { maxBatchSize: 100, maxBatchTimeout: 0, maxRetries: 10 } },
    bindings: vars,
    // Enables /cdn-cgi/handler/scheduled: unlike getWorker().scheduled(), whose calls go through
    // one proxy connection one at a time, separate requests there run concurrently.
    unsafeTriggerHandlers: true,
  });
  await mf.ready;
  const db = (await mf.getD1Database('DB')) as unknown as D1Db;
  await migrateD1(db);
  for (const sql of statements(readFileSync(exampleSql, 'utf8'))) await db.prepare(sql).run();
  const worker = await mf.getWorker();
  return {
    mf,
    db,
    async scheduled() {
      const response = await mf.dispatchFetch(
        'http://example.test/cdn-cgi/handler/scheduled?cron=*+*+*+*+*',
      );
      const text = await response.text();
      if (!response.ok) throw new Error(`scheduled() failed: ${response.status} ${text}`);
    },
    async deliver(messages) {
      const result = await worker.queue(
        QUEUE_NAME,
        messages.map((m) => ({
          id: m.id,
          timestamp: new Date(),
          body: m.body,
          attempts: m.attempts ?? 1,
        })),
      );
      if (result.outcome !== 'ok') throw new Error(`queue() ended with ${result.outcome}`);
      return {
        explicitAcks: [...result.explicitAcks],
        retryMessages: result.retryMessages.map((r) => ({ ...r })),
      };
    },
    post: (path, body, headers = {}) =>
      mf.dispatchFetch(`http://example.test${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      }) as unknown as Promise<Response>,
    dispose: () => mf.dispose(),
  };
}

/** Polls `read` until `done` holds; fails with the last value after `timeoutMs`. Not a timing assertion. */
export async function waitFor<T>(
  read: () => Promise<T>,
  done: (value: T) => boolean,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline)
      throw new Error(
        `condition not reached in ${timeoutMs} ms; last value ${JSON.stringify(value)}`,
      );
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
