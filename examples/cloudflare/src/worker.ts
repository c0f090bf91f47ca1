import {
  createScheduledDispatcher,
  traceHeaders,
  type D1Db,
  type QueueBatch,
  type QueueProducer,
} from '../../../src/cloudflare/index.js';
import { orderConsumer } from './consumer.js';
import { createOrder } from './create-order.js';

/** Bindings declared in wrangler.toml. */
export interface Env {
  DB: D1Db;
  QUEUE: QueueProducer;
  /** Messages per claim (string: wrangler `[vars]`). Default 100. */
  DISPATCH_BATCH_SIZE?: string;
  /** How long one cron run keeps draining, in ms. Default 25000. */
  DISPATCH_TIME_BUDGET_MS?: string;
  /** The queue's `max_retries` + 1. Default 11 (wrangler.toml sets max_retries = 10). */
  CONSUMER_MAX_ATTEMPTS?: string;
}

function numberVar(value: string | undefined, fallback: number): number {
  return value === undefined || value === '' ? fallback : Number(value);
}

/**
 * The example Worker: an HTTP endpoint for the `create_order` tool (what an agent's tool call
 * reaches), the outbox dispatcher on the Cron Trigger, and the consumer on the queue.
 */
export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    if (request.method === 'POST' && url.pathname === '/tools/create_order') {
      const input: unknown = await request.json().catch(() => undefined);
      // The trace starts at the edge: the caller's traceparent, or a new one.
      const result = await createOrder(env.DB, input, traceHeaders(request));
      return Response.json(result, { status: result.ok ? 200 : 400 });
    }
    return new Response('not found', { status: 404 });
  },

  async scheduled(_controller: unknown, env: Env): Promise<void> {
    const summary = await createScheduledDispatcher({
      db: env.DB,
      queue: env.QUEUE,
      batchSize: numberVar(env.DISPATCH_BATCH_SIZE, 100),
      timeBudgetMs: numberVar(env.DISPATCH_TIME_BUDGET_MS, 25_000),
    }).run();
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
