import {
  createScheduledDispatcher,
  OutboxDispatcherObject,
  traceHeaders,
  wakeDispatcher,
  type D1Db,
  type DispatcherObjectOptions,
  type DurableObjectNamespaceLike,
  type QueueBatch,
  type QueueProducer,
} from '../../../src/cloudflare/index.js';
import { orderConsumer } from './consumer.js';
import { createOrder } from './create-order.js';

/** Bindings declared in wrangler.toml. */
export interface Env {
  DB: D1Db;
  QUEUE: QueueProducer;
  /**
   * The outbox's Durable Object dispatcher ({@link OutboxDispatcher}). Optional: without it the
   * Cron Trigger alone dispatches (commit-to-send up to a minute).
   */
  OUTBOX_DISPATCHER?: DurableObjectNamespaceLike;
  /** Messages per claim (string: wrangler `[vars]`). Default 100. */
  DISPATCH_BATCH_SIZE?: string;
  /** How long one dispatcher run keeps draining, in ms. Default 25000. */
  DISPATCH_TIME_BUDGET_MS?: string;
  /** How long a claim keeps other runs away, in ms. Default 60000. */
  DISPATCH_LEASE_MS?: string;
  /** The Durable Object's alarm right after work, in ms (doubling while idle). Default 1000. */
  DISPATCHER_ALARM_MIN_MS?: string;
  /** The Durable Object's longest idle alarm interval, in ms. Default 30000. */
  DISPATCHER_ALARM_MAX_MS?: string;
  /** The queue's `max_retries` + 1. Default 11 (wrangler.toml sets max_retries = 10). */
  CONSUMER_MAX_ATTEMPTS?: string;
}

/** What a Worker invocation offers to run work after the response (`ExecutionContext`). */
interface Context {
  waitUntil(promise: Promise<unknown>): void;
}

function numberVar(value: string | undefined, fallback: number): number {
  return value === undefined || value === '' ? fallback : Number(value);
}

/** The dispatcher options both paths share, from `[vars]`. */
function dispatchOptions(env: Env) {
  return {
    db: env.DB,
    queue: env.QUEUE,
    batchSize: numberVar(env.DISPATCH_BATCH_SIZE, 100),
    timeBudgetMs: numberVar(env.DISPATCH_TIME_BUDGET_MS, 25_000),
    leaseMs: numberVar(env.DISPATCH_LEASE_MS, 60_000),
  };
}

/**
 * The Durable Object that dispatches within about a second of a commit: the library's object,
 * with its options taken from `[vars]` (the base class reads only `env.DB` and `env.QUEUE`).
 * Exported by name: wrangler.toml binds it as `OUTBOX_DISPATCHER` and migrates it.
 */
export class OutboxDispatcher extends OutboxDispatcherObject {
  protected override dispatcherOptions(env: Env): DispatcherObjectOptions {
    return {
      ...dispatchOptions(env),
      alarmMinIntervalMs: numberVar(env.DISPATCHER_ALARM_MIN_MS, 1_000),
      alarmMaxIntervalMs: numberVar(env.DISPATCHER_ALARM_MAX_MS, 30_000),
    };
  }
}

/**
 * The example Worker: an HTTP endpoint for the `create_order` tool (what an agent's tool call
 * reaches), the outbox dispatcher (a Durable Object woken after each commit, and the Cron Trigger
 * as a second safety net), and the consumer on the queue.
 */
export default {
  async fetch(request: Request, env: Env, ctx: Context): Promise<Response> {
    const url = new URL(request.url);
    if (request.method === 'POST' && url.pathname === '/tools/create_order') {
      const input: unknown = await request.json().catch(() => undefined);
      // The trace starts at the edge: the caller's traceparent, or a new one.
      const result = await createOrder(env.DB, input, traceHeaders(request));
      // The batch has committed: wake the dispatcher, after the response. A lost wake-up costs
      // only latency (the object's alarm, then the Cron Trigger, send the messages anyway).
      if (result.ok && !result.deduped && env.OUTBOX_DISPATCHER)
        ctx.waitUntil(wakeDispatcher(env.OUTBOX_DISPATCHER));
      return Response.json(result, { status: result.ok ? 200 : 400 });
    }
    return new Response('not found', { status: 404 });
  },

  async scheduled(_controller: unknown, env: Env, ctx: Context): Promise<void> {
    // Also keeps the object's alarm chain going (after a deploy, or if a wake-up never came).
    if (env.OUTBOX_DISPATCHER) ctx.waitUntil(wakeDispatcher(env.OUTBOX_DISPATCHER));
    const summary = await createScheduledDispatcher(dispatchOptions(env)).run();
    await env.DB.prepare(
      `INSERT INTO dispatch_runs (claimed, published, retried, dead_lettered, fenced, stopped_by, finished_at)
       VALUES (?, ?, ?, ?, ?, ?, ?)`,
    )
      .bind(
        summary.claimed,
        summary.published,
        summary.retried,
        summary.deadLettered,
        summary.fenced,
        summary.stoppedBy,
        Date.now(),
      )
      .run();
  },

  async queue(batch: QueueBatch, env: Env): Promise<void> {
    const consumer = orderConsumer(env.DB, numberVar(env.CONSUMER_MAX_ATTEMPTS, 11));
    const results = await consumer.handleBatch(batch);
    // What the queue delivered, duplicates included: operators (and tests) can compare it with
    // the effects, which happen once.
    await env.DB.batch(
      batch.messages.map((delivery, index) =>
        env.DB.prepare(
          'INSERT INTO deliveries (queue_message_id, message_id, attempts, result) VALUES (?, ?, ?, ?)',
        ).bind(
          delivery.id,
          results[index]?.messageId ?? null,
          delivery.attempts,
          `${results[index]?.action}:${results[index]?.reason}`,
        ),
      ),
    );
  },
};
