import { readFile } from 'node:fs/promises';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import type { OutboxMessage } from '../../../src/core/message.js';
import type { Dispatcher } from '../../../src/dispatcher/dispatcher.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { readLaneEngineStatus } from '../../../src/lanes/lane-engine-status.js';
import { serveDispatcherMetrics } from '../../../src/metrics/serve-dispatcher-metrics.js';
import type { Publisher } from '../../../src/publishers/publisher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';
import { eventually, freePort } from '../../fixtures/ops/tools.js';

/**
 * The Prometheus metrics and `/healthz` of a lanes dispatcher (issue 43): the claim engine's
 * names and labels, so ops/prometheus/alerts.yml holds unchanged. Real Postgres, a real lanes
 * dispatcher, /metrics scraped over HTTP.
 */
let db: TestDatabase;
const closing: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
});
afterEach(async () => {
  while (closing.length > 0) await closing.pop()!();
  await db.pool.query(
    'TRUNCATE outbox_lane_messages, outbox_lane_parked; UPDATE outbox_lanes SET cursor = 0, owner = NULL, lease_expires_at = NULL',
  );
});
afterAll(async () => {
  await db?.drop();
});

const write = (messages: readonly OutboxMessage[]) => enqueueLanes(db.pool, messages);

const mails = (n: number, prefix = 'm') =>
  Array.from({ length: n }, (_, i) => ({
    topic: 'mail.send',
    aggregateId: `${prefix}-${i}`,
    payload: { i },
  }));

async function serve(dispatcher: Dispatcher, healthStallMs?: number) {
  const served = await serveDispatcherMetrics({
    dispatcher,
    executor: fromPg(db.pool),
    engine: 'lanes',
    port: await freePort(),
    gaugeIntervalMs: 100,
    ...(healthStallMs !== undefined && { healthStallMs }),
  });
  closing.push(served.close);
  return served;
}

/**
 * A status read started now: refresh() joins a periodic read in flight (one at a time), which
 * may have started before what the test just did.
 */
async function freshRead(metrics: { refresh(): Promise<void> }): Promise<void> {
  await metrics.refresh();
  await metrics.refresh();
}

async function scrape(url: string): Promise<string> {
  return (await fetch(`${url}/metrics`)).text();
}

/** The value of one sample line (`name{labels}`), or undefined. */
function sample(body: string, series: string): number | undefined {
  const line = body.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('metrics of a lanes dispatcher', () => {
  it('gauges the backlog exactly, counts the drain and a dead letter by topic', async () => {
    await write([
      ...mails(6),
      { topic: 'payment.charge', aggregateId: 'bad-1', payload: {} },
      ...mails(3, 'later'),
    ]);
    const publisher: Publisher = {
      publish: async (messages) =>
        messages.map((m) =>
          m.topic === 'payment.charge'
            ? { status: 'permanent' as const, error: 'card refused' }
            : { status: 'published' as const },
        ),
    };
    const dispatcher = createLaneDispatcher({ executor: fromPg(db.pool), publisher });
    const served = await serve(dispatcher);
    await freshRead(served.metrics);
    const before = await scrape(served.url);
    expect(sample(before, 'outbox_pending_messages')).toBe(10);
    expect(sample(before, 'outbox_due_messages')).toBe(10);
    expect(sample(before, 'outbox_dead_letter_messages')).toBe(0);
    expect(sample(before, 'outbox_oldest_pending_age_seconds')).toBeGreaterThan(0);

    await dispatcher.drain();
    await freshRead(served.metrics);
    const after = await scrape(served.url);
    expect(sample(after, 'outbox_messages_published_total{topic="mail.send"}')).toBe(9);
    expect(
      sample(after, 'outbox_publish_failures_total{topic="payment.charge",kind="permanent"}'),
    ).toBe(1);
    expect(sample(after, 'outbox_messages_dead_lettered_total{topic="payment.charge"}')).toBe(1);
    expect(sample(after, 'outbox_dispatch_latency_seconds_count{topic="mail.send"}')).toBe(9);
    expect(sample(after, 'outbox_delivery_attempts_count{topic="payment.charge"}')).toBe(1);
    // The database gauges, read from the lanes tables after the drain.
    expect(sample(after, 'outbox_pending_messages')).toBe(0);
    expect(sample(after, 'outbox_due_messages')).toBe(0);
    expect(sample(after, 'outbox_dead_letter_messages')).toBe(1);
    expect(sample(after, 'outbox_oldest_pending_age_seconds')).toBe(0);
    expect(sample(after, 'outbox_database_read_only')).toBe(0);
    expect((await fetch(`${served.url}/healthz`)).status).toBe(200);
    // Every series the alert rules read is exported (with samples), under the same name.
    const rules = await readFile(
      new URL('../../../ops/prometheus/alerts.yml', import.meta.url),
      'utf8',
    );
    const names = new Set(
      [...rules.matchAll(/\boutbox_[a-z_]+/g)].map((m) => m[0].replace(/_(bucket|count|sum)$/, '')),
    );
    expect(names.size).toBeGreaterThanOrEqual(7);
    for (const name of names)
      expect(after, name).toMatch(new RegExp(`^${name}(_bucket|_count|_sum)?(\\{[^}]*\\})? `, 'm'));
  });

  it('counts what waits behind a failure and the failure waiting for its retry', async () => {
    // An ordered aggregate fails and parks; the two messages after it park behind it.
    await write([
      { topic: 'payment.charge', aggregateId: 'order-1', payload: { n: 1 } },
      { topic: 'payment.charge', aggregateId: 'order-1', payload: { n: 2 } },
      { topic: 'payment.charge', aggregateId: 'order-1', payload: { n: 3 } },
      ...mails(2),
    ]);
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: {
        publish: async (messages) =>
          messages.map((m) =>
            m.topic === 'payment.charge'
              ? { status: 'retryable' as const, error: 'down' }
              : { status: 'published' as const },
          ),
      },
      backoff: { baseMs: 3_600_000, maxMs: 3_600_000, jitterMs: 0 },
    });
    await dispatcher.drain();
    const status = await readLaneEngineStatus(fromPg(db.pool));
    expect(status).toMatchObject({
      backlog: 3,
      dueNow: 0,
      scheduled: 1,
      deadLetters: 0,
      backlogEstimated: false,
    });
    expect(status.attempts).toEqual([
      { attempts: 0, messages: 2 },
      { attempts: 1, messages: 1 },
    ]);
    expect(status.lastErrors).toMatchObject([
      { topic: 'payment.charge', aggregateId: 'order-1', attempts: 1, lastError: 'down' },
    ]);
    expect(status.oldestPendingAgeSeconds).toBeGreaterThan(0);
  });
});

describe('/healthz of a lanes dispatcher', () => {
  it('fails while due messages are stuck in a publish, and recovers once they go out', async () => {
    await write(mails(3));
    let release!: () => void;
    const stuck = new Promise<void>((resolve) => (release = resolve));
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: {
        publish: async (messages) => {
          await stuck;
          return messages.map(() => ({ status: 'published' as const }));
        },
      },
      pollIntervalMs: 50,
    });
    const served = await serve(dispatcher, 600);
    dispatcher.start();
    closing.push(() => dispatcher.stop());
    const health = await eventually('healthz 503 on a stall', async () => {
      const response = await fetch(`${served.url}/healthz`);
      return response.status === 503 ? ((await response.json()) as { reason: string }) : undefined;
    });
    expect(health.reason).toMatch(/3 messages due and none dispatched/);
    release();
    await eventually('healthz 200 after the publish', async () =>
      (await fetch(`${served.url}/healthz`)).status === 200 ? true : undefined,
    );
    expect(
      sample(await scrape(served.url), 'outbox_messages_published_total{topic="mail.send"}'),
    ).toBe(3);
  });

  it('stays healthy while a backlog drains slowly: each batch counts as progress', async () => {
    // One message a batch, 200 ms each, stall threshold 600 ms: the backlog stays due for over
    // 2 s, and the dispatcher is never 600 ms without publishing.
    await write(mails(12));
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: {
        publish: async (messages) => {
          await new Promise((r) => setTimeout(r, 200));
          return messages.map(() => ({ status: 'published' as const }));
        },
      },
      batchSize: 1,
      pollIntervalMs: 50,
    });
    const served = await serve(dispatcher, 600);
    dispatcher.start();
    closing.push(() => dispatcher.stop());
    const seen: number[] = [];
    const dueSeen: number[] = [];
    const until = Date.now() + 2_200;
    while (Date.now() < until) {
      const response = await fetch(`${served.url}/healthz`);
      const body = (await response.json()) as { dueNow: number | null };
      seen.push(response.status);
      dueSeen.push(body.dueNow ?? 0);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(Math.max(...dueSeen)).toBeGreaterThan(0);
    expect(seen.filter((s) => s !== 200)).toEqual([]);
  });
});

describe('a read-only database under a lanes dispatcher', () => {
  /** From the admin database: the test database's sessions turn read-only (new ones only). */
  async function setReadOnly(on: boolean): Promise<void> {
    const admin = new pg.Client({ connectionString: inject('adminDatabaseUrl') });
    await admin.connect();
    try {
      await admin.query(
        `ALTER DATABASE "${db.name}" SET default_transaction_read_only = ${on ? 'on' : 'off'}`,
      );
      await admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`,
        [db.name],
      );
    } finally {
      await admin.end();
    }
  }

  it('sets outbox_database_read_only and fails /healthz while writes are refused, and clears both after', async () => {
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: { publish: async (m) => m.map(() => ({ status: 'published' as const })) },
      pollIntervalMs: 50,
    });
    db.pool.on('error', () => undefined);
    const served = await serve(dispatcher);
    dispatcher.start();
    closing.push(() => dispatcher.stop());
    closing.push(() => setReadOnly(false));
    await setReadOnly(true);
    const health = await eventually('healthz 503 read-only', async () => {
      const response = await fetch(`${served.url}/healthz`);
      return response.status === 503
        ? ((await response.json()) as { databaseReadOnly: boolean; reason: string })
        : undefined;
    });
    expect(health.databaseReadOnly).toBe(true);
    expect(health.reason).toMatch(/read-only/);
    expect(sample(await scrape(served.url), 'outbox_database_read_only')).toBe(1);
    await setReadOnly(false);
    await eventually('healthz 200 once writable', async () =>
      (await fetch(`${served.url}/healthz`)).status === 200 ? true : undefined,
    );
    expect(sample(await scrape(served.url), 'outbox_database_read_only')).toBe(0);
  }, 60_000);
});
