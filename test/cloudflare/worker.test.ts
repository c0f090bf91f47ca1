import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startExampleWorker, waitFor, type ExampleWorker } from './helpers/miniflare.js';
import { envelope, envelopeOf } from './helpers/envelopes.js';
import {
  CloudflareQueuesPublisher,
  createScheduledDispatcher,
  type QueueProducer,
} from '../../src/cloudflare/index.js';
import type { Publisher } from '../../src/publishers/publisher.js';

/**
 * The example Worker (examples/cloudflare) on Miniflare/workerd with a real D1 and Queue: the
 * create_order tool, the Cron dispatcher and the queue consumer, end to end. One Miniflare for
 * the file; every test uses its own order ids.
 */
let w: ExampleWorker;

beforeAll(async () => {
  // Small claims, so a run loops many times and two overlapping runs interleave.
  w = await startExampleWorker({ DISPATCH_BATCH_SIZE: '4', CONSUMER_MAX_ATTEMPTS: '11' });
});

afterAll(async () => {
  await w?.dispose();
});

const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

function order(orderId: string, quantity = 2) {
  return {
    orderId,
    customerEmail: `${orderId}@example.test`,
    lines: [
      { sku: 'tea', quantity, unitPriceCents: 450 },
      { sku: 'cup', quantity: 1, unitPriceCents: 900 },
    ],
  };
}

async function count(sql: string, ...values: unknown[]): Promise<number> {
  const row = await w.db
    .prepare(sql)
    .bind(...values)
    .first<{ n: number }>();
  return Number(row?.n ?? 0);
}

function marks(values: readonly unknown[]): string {
  return values.map(() => '?').join(',');
}

/**
 * How often the queue delivered each message for the first time, once every message arrived. A
 * second send of a message arrives again with attempts = 1; early-order retries have attempts > 1.
 */
async function firstDeliveryCounts(messageIds: readonly string[]): Promise<number[]> {
  const rows = await waitFor(
    async () =>
      (
        await w.db
          .prepare(
            `SELECT message_id, count(*) AS n FROM deliveries WHERE attempts = 1 AND message_id IN (${marks(messageIds)}) GROUP BY message_id`,
          )
          .bind(...messageIds)
          .all<{ message_id: string; n: number }>()
      ).results,
    (found) => found.length === messageIds.length,
  );
  const byId = new Map(rows.map((r) => [r.message_id, Number(r.n)]));
  return messageIds.map((id) => byId.get(id) ?? 0);
}

async function outboxRows(orderId: string) {
  const { results } = await w.db
    .prepare(
      'SELECT message_id, topic, sequence, headers, dispatched_at, attempts FROM outbox WHERE aggregate_id = ? ORDER BY sequence',
    )
    .bind(`order:${orderId}`)
    .all<{
      message_id: string;
      topic: string;
      sequence: number;
      headers: string;
      dispatched_at: number | null;
      attempts: number;
    }>();
  return results;
}

describe('create_order tool on D1', () => {
  it('writes the order, its lines and its outbox messages in one batch', async () => {
    const response = await w.post('/tools/create_order', order('A1'), {
      traceparent: TRACEPARENT,
    });
    expect(response.status).toBe(200);
    const result = (await response.json()) as { ok: boolean; messageIds: string[] };
    expect(result.ok).toBe(true);
    expect(await count('SELECT count(*) AS n FROM orders WHERE id = ?', 'A1')).toBe(1);
    expect(await count('SELECT count(*) AS n FROM order_lines WHERE order_id = ?', 'A1')).toBe(2);
    const rows = await outboxRows('A1');
    expect(rows.map((r) => [r.topic, r.sequence])).toEqual([
      ['payment.charge', 1],
      ['mail.send', 2],
      ['order.status', 3],
    ]);
    expect(rows.map((r) => r.message_id)).toEqual(result.messageIds);
    for (const row of rows) expect(JSON.parse(row.headers).traceparent).toBe(TRACEPARENT);
  });

  it('leaves no order and no outbox row when a statement after both fails', async () => {
    // quantity 1000 passes the tool's checks but violates order_lines' CHECK, which runs after
    // the order insert and the outbox inserts in the same batch.
    const response = await w.post('/tools/create_order', order('A2', 1000));
    expect(response.status).toBe(400);
    expect(await count('SELECT count(*) AS n FROM orders WHERE id = ?', 'A2')).toBe(0);
    expect(await count("SELECT count(*) AS n FROM outbox WHERE aggregate_id = 'order:A2'")).toBe(0);
    // The sequence counter rolled back too: the next successful write starts at 1.
    expect(
      await count("SELECT count(*) AS n FROM outbox_aggregates WHERE aggregate_id = 'order:A2'"),
    ).toBe(0);
    expect((await w.post('/tools/create_order', order('A2'))).status).toBe(200);
    expect((await outboxRows('A2')).map((r) => r.sequence)).toEqual([1, 2, 3]);
  });

  it('answers a repeated call as deduped and writes nothing more', async () => {
    await w.post('/tools/create_order', order('A3'));
    const again = (await (await w.post('/tools/create_order', order('A3'))).json()) as {
      deduped: boolean;
    };
    expect(again.deduped).toBe(true);
    expect(await outboxRows('A3')).toHaveLength(3);
  });
});

describe('Cron dispatcher → Queue → consumer', () => {
  it('delivers every message, performs each effect once, and carries the trace', async () => {
    await w.post('/tools/create_order', order('B1'), { traceparent: TRACEPARENT });
    await w.scheduled();
    const rows = await outboxRows('B1');
    expect(rows.every((r) => r.dispatched_at !== null)).toBe(true);
    await waitFor(
      () => count("SELECT count(*) AS n FROM order_events WHERE order_id = 'B1'"),
      (n) => n === 1,
    );
    const payment = await w.db
      .prepare("SELECT amount_cents, traceparent FROM payments WHERE order_id = 'B1'")
      .all<{ amount_cents: number; traceparent: string }>();
    expect(payment.results).toEqual([{ amount_cents: 1800, traceparent: TRACEPARENT }]);
    expect(
      await count("SELECT count(*) AS n FROM mailbox WHERE to_address = 'B1@example.test'"),
    ).toBe(1);

    // Forced redelivery of the payment (as after a lost ack): acknowledged, no second charge.
    const payMessage = rows.find((r) => r.topic === 'payment.charge')!;
    const redelivered = await w.deliver([
      {
        id: 'forced-redelivery-1',
        body: await envelopeOf(w.db, payMessage.message_id),
        attempts: 1,
      },
    ]);
    expect(redelivered.explicitAcks).toEqual(['forced-redelivery-1']);
    expect(redelivered.retryMessages).toEqual([]);
    expect(await count("SELECT count(*) AS n FROM payments WHERE order_id = 'B1'")).toBe(1);
    expect(
      await count(
        "SELECT count(*) AS n FROM deliveries WHERE queue_message_id = 'forced-redelivery-1' AND result = 'ack:duplicate'",
      ),
    ).toBe(1);
  });

  it('never lets two scheduled runs at once send the same message', async () => {
    const ids = Array.from({ length: 20 }, (_, i) => `C${i}`);
    for (const id of ids) expect((await w.post('/tools/create_order', order(id))).status).toBe(200);
    const runsBefore = await count('SELECT coalesce(max(id), 0) AS n FROM dispatch_runs');

    // Note: Miniflare runs a Worker's scheduled events one after another once the Worker has a
    // Queue producer binding, so these two may not interleave; the next test forces overlap.
    await Promise.all([w.scheduled(), w.scheduled()]);

    const runs = await w.db
      .prepare('SELECT claimed, fenced FROM dispatch_runs WHERE id > ?')
      .bind(runsBefore)
      .all<{ claimed: number; fenced: number }>();
    expect(runs.results).toHaveLength(2);
    expect(runs.results.reduce((sum, r) => sum + r.claimed, 0)).toBe(ids.length * 3);
    expect(runs.results.reduce((sum, r) => sum + r.fenced, 0)).toBe(0);
    const messageIds: string[] = [];
    for (const id of ids) {
      const rows = await outboxRows(id);
      // attempts is counted at claim: 1 means no second claim ever sent it.
      expect(rows.map((r) => [r.attempts, r.dispatched_at !== null])).toEqual([
        [1, true],
        [1, true],
        [1, true],
      ]);
      messageIds.push(...rows.map((r) => r.message_id));
    }
    expect(await firstDeliveryCounts(messageIds)).toEqual(messageIds.map(() => 1));
    await waitFor(
      () =>
        count(`SELECT count(*) AS n FROM order_events WHERE order_id IN (${marks(ids)})`, ...ids),
      (n) => n === ids.length,
    );
    expect(
      await count(`SELECT count(*) AS n FROM payments WHERE order_id IN (${marks(ids)})`, ...ids),
    ).toBe(ids.length);
  });

  it('keeps two forcibly overlapping dispatcher runs on the same D1 and Queue disjoint', async () => {
    const ids = Array.from({ length: 10 }, (_, i) => `D${i}`);
    for (const id of ids) expect((await w.post('/tools/create_order', order(id))).status).toBe(200);
    const queue = new CloudflareQueuesPublisher(
      (await w.mf.getQueueProducer('QUEUE')) as unknown as QueueProducer,
    );
    // Run A holds its first batch (claimed, leased, not yet sent) until run B has claimed.
    let bClaimed!: () => void;
    const barrier = new Promise<void>((resolve) => (bClaimed = resolve));
    const sent = { a: [] as string[], b: [] as string[] };
    const recording = (name: 'a' | 'b'): Publisher => ({
      async publish(messages) {
        sent[name].push(...messages.map((m) => m.id));
        if (name === 'a') await barrier;
        else bClaimed();
        return queue.publish(messages);
      },
    });
    const dispatcher = (name: 'a' | 'b') =>
      createScheduledDispatcher({ db: w.db, publisher: recording(name), batchSize: 3 });

    const runA = dispatcher('a').run();
    const runB = dispatcher('b')
      .run()
      .finally(() => bClaimed());
    const [a, b] = await Promise.all([runA, runB]);

    expect(b.claimed).toBeGreaterThan(0); // B really ran while A held leases
    expect(a.claimed + b.claimed).toBe(ids.length * 3);
    expect(sent.a.filter((id) => sent.b.includes(id))).toEqual([]);
    const messageIds = [...sent.a, ...sent.b];
    expect(new Set(messageIds).size).toBe(ids.length * 3);
    expect(await firstDeliveryCounts(messageIds)).toEqual(messageIds.map(() => 1));
  });
});

describe('queue consumer ordering and poison', () => {
  it('retries a message that arrives before its predecessor and applies both in order', async () => {
    const first = envelope('order:R1', 1, 'order.status', { orderId: 'R1', status: 'paid' });
    const second = envelope('order:R1', 2, 'order.status', { orderId: 'R1', status: 'shipped' });

    const early = await w.deliver([{ id: 'r1-seq2-a', body: second }]);
    expect(early.explicitAcks).toEqual([]);
    expect(early.retryMessages).toEqual([{ msgId: 'r1-seq2-a', delaySeconds: 1 }]);
    expect(await count("SELECT count(*) AS n FROM order_events WHERE order_id = 'R1'")).toBe(0);

    expect((await w.deliver([{ id: 'r1-seq1', body: first }])).explicitAcks).toEqual(['r1-seq1']);
    const retried = await w.deliver([{ id: 'r1-seq2-a', body: second, attempts: 2 }]);
    expect(retried.explicitAcks).toEqual(['r1-seq2-a']);

    const events = await w.db
      .prepare("SELECT sequence, status FROM order_events WHERE order_id = 'R1' ORDER BY id")
      .all();
    expect(events.results).toEqual([
      { sequence: 1, status: 'paid' },
      { sequence: 2, status: 'shipped' },
    ]);
  });

  it('acknowledges a poison body and records it in consumer_dead_letters', async () => {
    const result = await w.deliver([{ id: 'poison-1', body: 'not an envelope' }]);
    expect(result.explicitAcks).toEqual(['poison-1']);
    const row = await w.db
      .prepare("SELECT reason, body FROM consumer_dead_letters WHERE queue_message_id = 'poison-1'")
      .first();
    expect(row).toEqual({ reason: 'poison', body: 'not an envelope' });
  });
});
