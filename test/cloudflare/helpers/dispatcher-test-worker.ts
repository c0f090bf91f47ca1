import example, { OutboxDispatcher, type Env } from '../../../examples/cloudflare/src/worker.js';
import {
  CloudflareQueuesPublisher,
  createScheduledDispatcher,
  dispatcherStatus,
  enqueue,
  wakeDispatcher,
  type DispatcherObjectOptions,
  type DurableObjectStateLike,
} from '../../../src/cloudflare/index.js';
import type { Publisher } from '../../../src/publishers/publisher.js';
import { handleD1Request } from './http-d1.js';

/**
 * The example Worker for the Durable Object tests, bundled and run on Miniflare: its `fetch` (the
 * create_order tool, which wakes the object after its batch commits) and `queue` as they are; the
 * object and the Cron path send through the example's Queue with a publisher that also logs every
 * accepted message in `sends` (created by the test) — which dispatcher sent it, when, in which
 * order — and the object can be made to abort itself mid-batch (`/test/abort-after-sends?n=`).
 */

/** The Queues publisher, logging what the queue accepted, in the order it was accepted. */
function loggingPublisher(env: Env, via: string, afterSend?: () => void): Publisher {
  const queue = new CloudflareQueuesPublisher(env.QUEUE);
  return {
    ordersWithinCall: true,
    async publish(messages) {
      const outcomes = await queue.publish(messages);
      const sent = messages.filter((_, i) => outcomes[i]?.status === 'published');
      if (sent.length > 0)
        await env.DB.batch(
          sent.map((m) =>
            env.DB.prepare(
              'INSERT INTO sends (message_id, aggregate_id, sequence, via, sent_at) VALUES (?, ?, ?, ?, ?)',
            ).bind(m.id, m.aggregateId, m.sequence, via, Date.now()),
          ),
        );
      afterSend?.();
      return outcomes;
    },
  };
}

/** The example's object, logging its sends under its instance id; can abort itself mid-batch. */
export class TestDispatcher extends OutboxDispatcher {
  readonly #ctx: DurableObjectStateLike & { abort(reason?: string): void };
  readonly #instance = crypto.randomUUID();
  #abortAfterSends = 0;
  #sendCalls = 0;

  constructor(ctx: DurableObjectStateLike & { abort(reason?: string): void }, env: Env) {
    super(ctx, env);
    this.#ctx = ctx;
  }

  protected override dispatcherOptions(env: Env): DispatcherObjectOptions {
    return {
      ...super.dispatcherOptions(env),
      publisher: loggingPublisher(env, `object:${this.#instance}`, () => {
        this.#sendCalls += 1;
        // Sent and logged, not settled: the restart leaves the batch leased.
        if (this.#abortAfterSends > 0 && this.#sendCalls >= this.#abortAfterSends)
          this.#ctx.abort('test: restarted mid-batch');
      }),
    };
  }

  override async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname === '/test/abort-after-sends') {
      this.#abortAfterSends = Number(url.searchParams.get('n'));
      return new Response('armed');
    }
    return super.fetch(request);
  }
}

export default {
  /**
   * The example's routes, and test routes: `POST /test/write-without-wake` commits messages and
   * wakes nothing; `POST /test/d1` runs statements for the test (helpers/http-d1.ts); `/test/dispatcher/{status,wake,abort-after-sends}` reach the object from inside
   * the Worker (tests drive everything through HTTP: Miniflare's Node-side proxies of a Durable
   * Object namespace lost their stubs under load).
   */
  async fetch(
    request: Request,
    env: Env,
    ctx: { waitUntil(promise: Promise<unknown>): void },
  ): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname === '/test/d1') return handleD1Request(request, env.DB);
    const objects = env.OUTBOX_DISPATCHER!;
    if (url.pathname === '/test/dispatcher/status')
      return Response.json(await dispatcherStatus(objects));
    if (url.pathname === '/test/dispatcher/wake')
      return Response.json({ woken: await wakeDispatcher(objects) });
    if (url.pathname === '/test/dispatcher/abort-after-sends') {
      const stub = objects.get(objects.idFromName('outbox'));
      const response = await stub.fetch(
        `https://agent-outbox.internal/test/abort-after-sends${url.search}`,
      );
      return new Response(await response.text(), { status: response.ok ? 200 : 500 });
    }
    if (url.pathname !== '/test/write-without-wake') return example.fetch(request, env, ctx);
    const { aggregateIds, count, delayMs } = (await request.json()) as {
      aggregateIds: string[];
      count: number;
      delayMs?: number;
    };
    const statements = enqueue(
      env.DB,
      aggregateIds.flatMap((aggregateId) =>
        Array.from({ length: count }, (_, n) => ({
          topic: 'order.status',
          aggregateId,
          payload: { orderId: aggregateId, status: `s${n + 1}` },
          ...(delayMs ? { delayMs } : {}),
        })),
      ),
    );
    await env.DB.batch(statements);
    return Response.json({ messageIds: statements.messageIds });
  },
  queue: example.queue,
  /** The example's `scheduled`, sending through the logging publisher. */
  async scheduled(
    _controller: unknown,
    env: Env,
    ctx: { waitUntil(promise: Promise<unknown>): void },
  ): Promise<void> {
    if (env.OUTBOX_DISPATCHER) ctx.waitUntil(wakeDispatcher(env.OUTBOX_DISPATCHER));
    await createScheduledDispatcher({
      db: env.DB,
      publisher: loggingPublisher(env, 'cron'),
      batchSize: Number(env.DISPATCH_BATCH_SIZE ?? 100),
      leaseMs: Number(env.DISPATCH_LEASE_MS ?? 60_000),
    }).run();
  },
};
