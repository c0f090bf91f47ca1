import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDispatcher, fromPg, InMemoryPublisher } from '../../../src/index.js';
import { createOutboxMetrics } from '../../../src/metrics/outbox-metrics.js';
import { startMetricsServer } from '../../../src/metrics/metrics-server.js';
import { serveDispatcherMetrics } from '../../../src/metrics/serve-dispatcher-metrics.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted } from '../../helpers/outbox-fixtures.js';

/** Value of one sample line of the Prometheus text format, or undefined. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

const fast = { pollIntervalMs: 50, backoff: { baseMs: 0, maxMs: 0, jitterMs: 0 } };

describe('outbox metrics', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db.drop());

  it('counts publishes, failures, dead letters and shadows by topic; observes latency and attempts', async () => {
    await enqueueCommitted(db.pool, [
      { topic: 'mail.send', aggregateId: 'a1', payload: { n: 1 } },
      { topic: 'mail.send', aggregateId: 'a2', payload: { n: 2 } },
      { topic: 'payment.charge', aggregateId: 'a3', payload: { poison: true } },
      { topic: 'audit.log', aggregateId: 'a4', payload: {}, shadow: true },
    ]);
    await db.pool.query(`UPDATE outbox SET created_at = now() - interval '45 seconds'`);
    const publisher = new InMemoryPublisher({
      inject: (m) =>
        m.topic === 'payment.charge' ? { status: 'retryable', error: 'broker said no' } : undefined,
    });
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      maxAttempts: 2,
      unorderedTopics: ['*'],
      ...fast,
    });
    const metrics = createOutboxMetrics({ executor: fromPg(db.pool) });
    metrics.attach(dispatcher);
    await dispatcher.drain();
    await dispatcher.drain();
    await metrics.refresh();
    const text = await metrics.registry.metrics();

    expect(sample(text, 'outbox_messages_published_total{topic="mail.send"}')).toBe(2);
    expect(sample(text, 'outbox_messages_published_total{topic="payment.charge"}')).toBeUndefined();
    expect(
      sample(text, 'outbox_publish_failures_total{topic="payment.charge",kind="retryable"}'),
    ).toBe(2);
    expect(sample(text, 'outbox_messages_dead_lettered_total{topic="payment.charge"}')).toBe(1);
    expect(sample(text, 'outbox_messages_shadowed_total')).toBe(1);
    // Written 45 s "ago": both land between the 30 s and 60 s buckets.
    expect(sample(text, 'outbox_dispatch_latency_seconds_bucket{le="30",topic="mail.send"}')).toBe(
      0,
    );
    expect(sample(text, 'outbox_dispatch_latency_seconds_bucket{le="60",topic="mail.send"}')).toBe(
      2,
    );
    // Attempts 1 and 2 of the failing message, attempt 1 of each mail.
    expect(sample(text, 'outbox_delivery_attempts_count{topic="payment.charge"}')).toBe(2);
    expect(sample(text, 'outbox_delivery_attempts_bucket{le="1",topic="payment.charge"}')).toBe(1);
    // Database gauges from the status read.
    expect(sample(text, 'outbox_pending_messages')).toBe(0);
    expect(sample(text, 'outbox_dead_letter_messages')).toBe(1);
    expect(sample(text, 'outbox_oldest_pending_age_seconds')).toBe(0);
    // A gauge never ends in _total; every metric the issue names is exported.
    expect(text).not.toMatch(/^# TYPE \S+_total gauge/m);
    for (const name of [
      'outbox_pending_messages',
      'outbox_oldest_pending_age_seconds',
      'outbox_dispatch_latency_seconds',
      'outbox_delivery_attempts',
      'outbox_messages_published_total',
      'outbox_publish_failures_total',
      'outbox_messages_dead_lettered_total',
      'outbox_dead_letter_messages',
      'outbox_cdc_slot_lag_bytes',
      'outbox_messages_shadowed_total',
      'outbox_database_read_only',
    ])
      expect(text).toContain(`# TYPE ${name} `);
    metrics.setCdcSlotLagBytes('outbox_slot', 4096);
    expect(
      sample(await metrics.registry.metrics(), 'outbox_cdc_slot_lag_bytes{slot="outbox_slot"}'),
    ).toBe(4096);
  });

  it('shows each paused route as outbox_route_paused (issue 27)', async () => {
    await db.pool.query(
      `INSERT INTO outbox_route_pauses (route, reason, paused_until, cooldown_ms)
       VALUES ('payment.**', 'HTTP 503', now() + interval '1 minute', 1000)`,
    );
    const metrics = createOutboxMetrics({ executor: fromPg(db.pool) });
    await metrics.refresh();
    expect(
      sample(await metrics.registry.metrics(), 'outbox_route_paused{route="payment.**"}'),
    ).toBe(1);
    await db.pool.query('DELETE FROM outbox_route_pauses');
    await metrics.refresh();
    expect(
      sample(await metrics.registry.metrics(), 'outbox_route_paused{route="payment.**"}'),
    ).toBeUndefined();
  });

  it('caps distinct topic labels, reporting later topics as "other"', async () => {
    await db.pool.query('DELETE FROM outbox');
    await enqueueCommitted(
      db.pool,
      Array.from({ length: 5 }, (_, i) => ({ topic: `t${i}`, aggregateId: `x${i}`, payload: {} })),
    );
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher: new InMemoryPublisher(),
      unorderedTopics: ['*'],
      ...fast,
    });
    const metrics = createOutboxMetrics({ executor: fromPg(db.pool), maxTopics: 3 });
    metrics.attach(dispatcher);
    await dispatcher.drain();
    const text = await metrics.registry.metrics();
    const topics = [
      ...text.matchAll(/^outbox_messages_published_total\{topic="([^"]+)"\} (\d+)/gm),
    ];
    expect(topics.map((m) => m[1]).sort()).toEqual(['other', 't0', 't1', 't2'].sort());
    expect(topics.find((m) => m[1] === 'other')![2]).toBe('2');
  });

  it('/healthz answers 503 when messages are due and nothing was dispatched for healthStallMs', async () => {
    await db.pool.query('DELETE FROM outbox');
    let clock = 1_000_000;
    const metrics = createOutboxMetrics({
      executor: fromPg(db.pool),
      healthStallMs: 60_000,
      now: () => clock,
    });
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher: new InMemoryPublisher(),
      ...fast,
    });
    metrics.attach(dispatcher);
    const server = await startMetricsServer({
      port: 0,
      registry: metrics.registry,
      health: metrics.health,
    });
    try {
      expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const health = async () => {
        const response = await fetch(`${server.url}/healthz`);
        return { status: response.status, body: (await response.json()) as { reason: string } };
      };
      await metrics.refresh();
      clock += 120_000;
      // Nothing due: idle is healthy however long it lasts.
      expect((await health()).status).toBe(200);

      await enqueueCommitted(db.pool, [{ topic: 'mail.send', aggregateId: 'h1', payload: {} }]);
      await metrics.refresh();
      clock += 30_000;
      expect((await health()).status).toBe(200);
      clock += 31_000;
      const stalled = await health();
      expect(stalled.status).toBe(503);
      expect(stalled.body.reason).toMatch(/1 messages due and none dispatched for 61s/);

      await dispatcher.drain();
      await metrics.refresh();
      expect((await health()).status).toBe(200);

      const scrape = await fetch(`${server.url}/metrics`);
      expect(scrape.status).toBe(200);
      expect(scrape.headers.get('content-type')).toMatch(/^text\/plain/);
      expect(await scrape.text()).toMatch(
        /^outbox_messages_published_total\{topic="mail.send"\} 1$/m,
      );
      expect((await fetch(`${server.url}/other`)).status).toBe(404);
      expect((await fetch(`${server.url}/metrics`, { method: 'POST' })).status).toBe(405);
    } finally {
      await server.close();
    }
  });

  it('serves scrapes from the cache: many scrapes, one status read per interval', async () => {
    let reads = 0;
    const executor = fromPg(db.pool);
    const counting = {
      query: <Row>(text: string, values?: readonly unknown[]) => {
        if (text.includes('AS backlog')) reads++;
        return executor.query<Row>(text, values);
      },
    };
    const metrics = createOutboxMetrics({ executor: counting, gaugeIntervalMs: 3_600_000 });
    metrics.start();
    await metrics.refresh();
    for (let i = 0; i < 20; i++) await metrics.registry.metrics();
    metrics.stop();
    expect(reads).toBe(1);
  });

  it('serveDispatcherMetrics wires metrics, refresh and server for `dispatch --metrics-port`', async () => {
    await db.pool.query('DELETE FROM outbox');
    await enqueueCommitted(db.pool, [{ topic: 'mail.send', aggregateId: 'w1', payload: {} }]);
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher: new InMemoryPublisher(),
      ...fast,
    });
    const served = await serveDispatcherMetrics({ dispatcher, executor: fromPg(db.pool), port: 0 });
    try {
      await dispatcher.drain();
      await served.metrics.refresh();
      const text = await (await fetch(`${served.url}/metrics`)).text();
      expect(sample(text, 'outbox_messages_published_total{topic="mail.send"}')).toBe(1);
      expect(sample(text, 'outbox_pending_messages')).toBe(0);
      expect((await fetch(`${served.url}/healthz`)).status).toBe(200);
    } finally {
      await served.close();
    }
    await expect(fetch(`${served.url}/metrics`)).rejects.toThrow();
  });
});
