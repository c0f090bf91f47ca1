import { readFileSync } from 'node:fs';
import { Miniflare } from 'miniflare';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CloudflareQueuesPublisher,
  createQueueConsumer,
  createScheduledDispatcher,
  d1MigrationScript,
  D1OutboxStore,
  enqueue,
  migrateD1,
  OutboxValidationError,
  PermanentError,
  type D1Db,
  type QueueDelivery,
  type QueueSendRequest,
} from '../../src/cloudflare/index.js';
import type { OutgoingMessage, PublishOutcome, Publisher } from '../../src/publishers/publisher.js';
import { bundleExampleWorker } from './helpers/worker-bundle.js';
import { envelope } from './helpers/envelopes.js';

/**
 * The D1 outbox's semantics on a real workerd D1 (Miniflare), driven from Node with an injected
 * clock: sequence assignment, lease claim and fencing, backoff, dead letters, time budget, and the
 * queue consumer's failure paths. One Miniflare for the file; each test uses its own aggregates.
 */
let mf: Miniflare;
let db: D1Db;

beforeAll(async () => {
  mf = new Miniflare({
    modules: true,
    script: 'export default { fetch() { return new Response("unused"); } }',
    compatibilityDate: '2025-01-01',
    d1Databases: ['DB'],
  });
  db = (await mf.getD1Database('DB')) as unknown as D1Db;
  await migrateD1(db);
});

afterAll(async () => {
  await mf?.dispose();
});

/** A publisher whose outcome per message is decided by the test. */
function fakePublisher(decide: (m: OutgoingMessage) => PublishOutcome): Publisher & {
  sent: OutgoingMessage[];
} {
  const sent: OutgoingMessage[] = [];
  return {
    sent,
    async publish(messages) {
      sent.push(...messages);
      return messages.map(decide);
    },
  };
}

async function write(aggregateId: string, topics: string[], payload: unknown = {}) {
  await db.batch(
    enqueue(
      db,
      topics.map((topic) => ({ topic, aggregateId, payload: payload as never })),
    ),
  );
}

async function row(aggregateId: string, sequence: number) {
  return db
    .prepare(
      'SELECT attempts, available_at, dispatched_at, dead_lettered_at, last_error, lease_owner FROM outbox WHERE aggregate_id = ? AND sequence = ?',
    )
    .bind(aggregateId, sequence)
    .first<{
      attempts: number;
      available_at: number;
      dispatched_at: number | null;
      dead_lettered_at: number | null;
      last_error: string | null;
      lease_owner: string | null;
    }>();
}

describe('D1 migrations', () => {
  it('are idempotent and match the example wrangler migration files, one file per version', async () => {
    expect(await migrateD1(db)).toEqual([]);
    const file = (name: string) =>
      readFileSync(
        new URL(`../../examples/cloudflare/migrations/${name}`, import.meta.url),
        'utf8',
      );
    expect(file('0001_agent_outbox.sql')).toBe(d1MigrationScript(1));
    expect(file('0003_agent_outbox_ordered_chains.sql')).toBe(d1MigrationScript(2));
    expect(file('0004_agent_outbox_plain_inserts.sql')).toBe(d1MigrationScript(3));
    expect(file('0005_agent_outbox_consumer_claims.sql')).toBe(d1MigrationScript(4));
    expect(d1MigrationScript()).toContain('ALTER TABLE outbox ADD COLUMN ready');
  });
});

describe('D1 writer', () => {
  it("takes a plain SQL INSERT INTO outbox as a message after the writer's ones, and refuses a NULL topic", async () => {
    await write('plain-1', ['payment.charge']);
    await db.batch([
      db
        .prepare('INSERT INTO outbox (aggregate_id, topic, payload) VALUES (?, ?, ?)')
        .bind('plain-1', 'mail.send', '{"to":"a"}'),
    ]);
    const rows = await db
      .prepare(
        'SELECT topic, sequence, ready, message_id FROM outbox WHERE aggregate_id = ? ORDER BY sequence',
      )
      .bind('plain-1')
      .all<{ topic: string; sequence: number; ready: number; message_id: string }>();
    expect(rows.results.map((r) => [r.topic, r.sequence, r.ready])).toEqual([
      ['payment.charge', 1, 1],
      ['mail.send', 2, 0],
    ]);
    expect(rows.results[1]!.message_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7/);
    await expect(
      db
        .prepare('INSERT INTO outbox (aggregate_id, topic, payload) VALUES (?, NULL, ?)')
        .bind('plain-1', '1')
        .run(),
    ).rejects.toThrow(/needs topic/);
  });

  it('rejects invalid messages with the Postgres writer errors and builds nothing', () => {
    expect(() => enqueue(db, { topic: '', aggregateId: 'a', payload: 1 })).toThrow(
      OutboxValidationError,
    );
    expect(() => enqueue(db, [{ topic: 't', aggregateId: 'a', payload: 10n as never }])).toThrow(
      /messages\[0\]\.payload: is a BigInt/,
    );
    expect(() => enqueue(db, [{ topic: 't', aggregateId: 'a', payload: 1, shadow: true }])).toThrow(
      /shadow/,
    );
    expect(() =>
      enqueue(db, [{ topic: 't', aggregateId: 'a', payload: 1, requiresApproval: true }]),
    ).toThrow(/messages\[0\]\.requiresApproval: approval holds are not supported/);
    expect(enqueue(db, [])).toHaveLength(0);
  });

  it('assigns gap-free per-aggregate sequences in commit order across concurrent batches', async () => {
    await Promise.all(Array.from({ length: 10 }, () => write('seq:1', ['a.created', 'a.updated'])));
    const { results } = await db
      .prepare("SELECT id, sequence FROM outbox WHERE aggregate_id = 'seq:1' ORDER BY id")
      .all<{ id: number; sequence: number }>();
    // id order is insert order; SQLite runs one write transaction at a time, so it is also
    // commit order — and sequences follow it exactly.
    expect(results.map((r) => r.sequence)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
  });
});

describe('D1 claim, lease and settle', () => {
  it('claims an ordered aggregate from its head, as a run, and unordered messages on their own', async () => {
    await write('head:1', ['order.created', 'order.paid']);
    await db.batch(
      enqueue(
        db,
        ['audit.one', 'audit.two'].map((topic) => ({
          topic,
          aggregateId: 'head:2',
          payload: {},
          ordered: false,
        })),
      ),
    );
    const store = new D1OutboxStore(db);
    const claimed = await store.claim({ owner: 'o1', batchSize: 100, leaseMs: 60_000 });
    const mine = claimed.filter((m) => m.aggregateId.startsWith('head:'));
    expect(mine.map((m) => [m.aggregateId, m.sequence, m.ordered ?? true]).sort()).toEqual([
      ['head:1', 1, true],
      ['head:1', 2, true],
      ['head:2', 1, false],
      ['head:2', 2, false],
    ]);
    await store.settle(
      'o1',
      claimed.map((m) => ({ rowId: m.rowId, kind: 'published' as const })),
    );
  });

  it('keeps a leased message from a second claim until the lease expires, then fences the old owner', async () => {
    let now = 2_000_000_000_000; // far ahead of other tests' rows, which are then all due
    const store = new D1OutboxStore(db, () => now);
    await write('lease:1', ['lease.test']);
    const claim = (owner: string) =>
      store
        .claim({ owner, batchSize: 1000, leaseMs: 10_000 })
        .then((ms) => ms.filter((m) => m.aggregateId === 'lease:1'));
    // Settle everything else this claim takes, so later tests start clean.
    const first = await store.claim({ owner: 'first', batchSize: 1000, leaseMs: 10_000 });
    const target = first.filter((m) => m.aggregateId === 'lease:1');
    expect(target).toHaveLength(1);
    await store.settle(
      'first',
      first
        .filter((m) => m.aggregateId !== 'lease:1')
        .map((m) => ({ rowId: m.rowId, kind: 'published' as const })),
    );

    now += 9_999;
    expect(await claim('second')).toEqual([]);
    now += 1;
    const taken = await claim('third');
    expect(taken.map((m) => m.attempts)).toEqual([2]);
    // The first claimant finishes late: its settle matches nothing, the newer claim decides.
    expect(
      (await store.settle('first', [{ rowId: target[0]!.rowId, kind: 'published' }])).settled,
    ).toEqual([]);
    expect((await row('lease:1', 1))?.dispatched_at).toBeNull();
    expect(
      (await store.settle('third', [{ rowId: target[0]!.rowId, kind: 'published' }])).settled,
    ).toEqual([target[0]!.rowId]);
    expect((await row('lease:1', 1))?.dispatched_at).toBe(now);
  });
});

describe('scheduled dispatcher', () => {
  it('backs off retryable failures, dead-letters at maxAttempts with a redacted error, and holds the aggregate', async () => {
    let now = 2_100_000_000_000;
    await write('retry:1', ['flaky.send', 'flaky.after']);
    const publisher = fakePublisher((m) =>
      m.aggregateId === 'retry:1'
        ? { status: 'retryable', error: 'connect failed to https://user:hunter2@broker.test' }
        : { status: 'published' },
    );
    const run = () =>
      createScheduledDispatcher({
        db,
        publisher,
        maxAttempts: 2,
        backoff: { baseMs: 30_000, maxMs: 900_000, jitterMs: 0 },
        now: () => now,
      }).run();

    const first = await run();
    expect(first.retried).toBe(1);
    let head = await row('retry:1', 1);
    expect(head).toMatchObject({ attempts: 1, available_at: now + 30_000, lease_owner: null });
    expect(head?.last_error).toContain('user:[REDACTED]@broker.test');
    expect(head?.last_error).not.toContain('hunter2');

    now += 29_999;
    expect((await run()).claimed).toBe(0); // not due yet; its successor waits behind it
    now += 1;
    expect((await run()).deadLettered).toBe(1);
    head = await row('retry:1', 1);
    expect(head?.dead_lettered_at).toBe(now);
    expect(head?.last_error).toMatch(/^gave up after 2 attempts/);
    // Policy `hold`: the dead letter blocks the aggregate's next ordered message — for every
    // dispatcher, since the policy applies when a message is dead-lettered, as in Postgres.
    expect((await run()).claimed).toBe(0);
    expect(publisher.sent.filter((m) => m.sequence === 2)).toEqual([]);
    const skipping = (decide: (m: OutgoingMessage) => PublishOutcome) =>
      createScheduledDispatcher({
        db,
        publisher: fakePublisher(decide),
        deadLetterPolicy: 'skip',
        now: () => now,
      }).run();
    expect((await skipping(() => ({ status: 'published' }))).claimed).toBe(0);

    // Policy `skip`: a dead letter leaves its aggregate's order, and its successor goes.
    await write('retry:2', ['flaky.send', 'flaky.after']);
    const skipped = await skipping((m) =>
      m.aggregateId === 'retry:2' && m.sequence === 1
        ? { status: 'permanent', error: 'rejected' }
        : { status: 'published' },
    );
    expect(skipped).toMatchObject({ deadLettered: 1, published: 1 });
    expect((await row('retry:2', 1))?.dead_lettered_at).toBe(now);
    expect((await row('retry:2', 2))?.dispatched_at).toBe(now);
  });

  it('dead-letters a message over the Queues size limit instead of sending it', async () => {
    const sent: QueueSendRequest[][] = [];
    const queue = { sendBatch: async (m: Iterable<QueueSendRequest>) => void sent.push([...m]) };
    await write('big:1', ['big.one'], { blob: 'x'.repeat(130_000) });
    const summary = await createScheduledDispatcher({
      db,
      queue,
      now: () => 2_200_000_000_000,
    }).run();
    expect(summary.deadLettered).toBe(1);
    expect(sent.flat()).toHaveLength(0);
    expect((await row('big:1', 1))?.last_error).toMatch(/Cloudflare Queues accepts at most/);
  });

  it('stops claiming when its time budget is spent', async () => {
    for (let i = 0; i < 5; i++) await write(`budget:${i}`, ['budget.one']);
    let now = 2_300_000_000_000;
    const slow = fakePublisher(() => {
      now += 400; // each send "takes" 400 ms
      return { status: 'published' };
    });
    const summary = await createScheduledDispatcher({
      db,
      publisher: slow,
      batchSize: 1,
      timeBudgetMs: 1_000,
      now: () => now,
    }).run();
    // Claims start at 0, 400 and 800 ms; at 1200 ms the budget is spent with 2 messages left.
    expect(summary).toMatchObject({ batches: 3, published: 3, stoppedBy: 'time-budget' });
  });
});

describe('Cloudflare Queues publisher', () => {
  const message = (i: number, bytes: number): OutgoingMessage => ({
    id: `m${i}`,
    rowId: String(i),
    topic: 't',
    aggregateId: `a${i}`,
    sequence: 1,
    payload: 'x'.repeat(bytes),
    headers: {},
    createdAt: new Date(0),
    attempts: 1,
  });

  it('chunks by 100 messages and by 256 KB, and fails only the chunk whose send failed', async () => {
    const calls: QueueSendRequest[][] = [];
    const queue = {
      async sendBatch(batch: Iterable<QueueSendRequest>) {
        const list = [...batch];
        calls.push(list);
        if (calls.length === 2) throw new Error('queue unavailable');
      },
    };
    const small = Array.from({ length: 150 }, (_, i) => message(i, 10));
    const outcomes = await new CloudflareQueuesPublisher(queue).publish(small);
    expect(calls.map((c) => c.length)).toEqual([100, 50]);
    expect(outcomes.slice(0, 100).every((o) => o.status === 'published')).toBe(true);
    expect(outcomes.slice(100).every((o) => o.status === 'retryable')).toBe(true);

    calls.length = 0;
    const large = Array.from({ length: 5 }, (_, i) => message(i, 100_000));
    await new CloudflareQueuesPublisher({
      sendBatch: async (b) => void calls.push([...b]),
    }).publish(large);
    expect(calls.map((c) => c.length)).toEqual([2, 2, 1]);
    expect(calls[0]![0]).toMatchObject({ contentType: 'json', body: { id: 'm0', sequence: 1 } });
  });

  it('sends nothing of an aggregate after its first message that was not accepted', async () => {
    const calls: string[][] = [];
    const of = (aggregateId: string, sequence: number, bytes: number): OutgoingMessage => ({
      ...message(sequence, bytes),
      id: `${aggregateId}${sequence}`,
      aggregateId,
      sequence,
    });
    const outcomes = await new CloudflareQueuesPublisher({
      sendBatch: async (b) => void calls.push([...b].map((r) => (r.body as { id: string }).id)),
    }).publish([of('A', 1, 10), of('A', 2, 130_000), of('A', 3, 10), of('B', 1, 10)]);
    expect(outcomes.map((o) => o.status)).toEqual([
      'published',
      'permanent',
      'retryable',
      'published',
    ]);
    expect(calls).toEqual([['A1', 'B1']]);
  });
});

describe('queue consumer failure paths', () => {
  function delivery(body: unknown, attempts = 1) {
    const state: { acked: boolean; retried?: { delaySeconds?: number } } = { acked: false };
    const d: QueueDelivery = {
      id: crypto.randomUUID(),
      timestamp: new Date(),
      body,
      attempts,
      ack: () => void (state.acked = true),
      retry: (options) => void (state.retried = options ?? {}),
    };
    return { d, state };
  }

  it('retries a failing handler with backoff and never acknowledges it', async () => {
    const consumer = createQueueConsumer({
      db,
      name: 'failing',
      retry: { baseMs: 2_000, jitterMs: 0 },
      handler: async () => {
        throw new Error('provider down');
      },
    });
    const { d, state } = delivery(envelope('fail:1', 1, 't', {}), 2);
    const result = await consumer.handle(d);
    expect(result).toMatchObject({ action: 'retry', reason: 'handler-failed' });
    expect(state).toEqual({ acked: false, retried: { delaySeconds: 4 } });
  });

  it('records a permanent failure, and a last failing attempt, in consumer_dead_letters', async () => {
    const consumer = createQueueConsumer({
      db,
      name: 'dead-lettering',
      maxAttempts: 3,
      handler: async (message) => {
        if (message.aggregateId === 'dead:permanent') throw new PermanentError('bad amount');
        throw new Error('still down');
      },
    });
    const permanent = delivery(envelope('dead:permanent', 1, 't', {}));
    const last = delivery(envelope('dead:last', 1, 't', {}), 3);
    expect((await consumer.handle(permanent.d)).reason).toBe('permanent-failure');
    expect((await consumer.handle(last.d)).reason).toBe('max-attempts');
    expect([permanent.state.acked, last.state.acked]).toEqual([true, true]);
    const { results } = await db
      .prepare(
        "SELECT reason, error FROM consumer_dead_letters WHERE consumer = 'dead-lettering' ORDER BY id",
      )
      .all();
    expect(results).toEqual([
      { reason: 'permanent-failure', error: 'bad amount' },
      { reason: 'max-attempts', error: 'attempt 3 of 3: still down' },
    ]);
  });

  it('rolls back the effect when a concurrent delivery recorded the message first', async () => {
    await db.prepare('CREATE TABLE IF NOT EXISTS effects (message_id TEXT)').run();
    const message = envelope('race:1', 1, 'race.topic', {});
    const consumer = createQueueConsumer({
      db,
      name: 'racing',
      ordered: ['race.topic'],
      handler: async (m) => {
        // Another delivery of the same message commits while this one runs its handler.
        await db
          .prepare(
            "INSERT INTO processed_messages (consumer, message_id, processed_at) VALUES ('racing', ?, 0)",
          )
          .bind(m.id)
          .run();
        return [db.prepare('INSERT INTO effects (message_id) VALUES (?)').bind(m.id)];
      },
    });
    const { d, state } = delivery(message);
    expect(await consumer.handle(d)).toMatchObject({ action: 'ack', reason: 'duplicate' });
    expect(state.acked).toBe(true);
    const effects = await db
      .prepare('SELECT count(*) AS n FROM effects WHERE message_id = ?')
      .bind(message.id)
      .first<{ n: number }>();
    expect(effects?.n).toBe(0);
  });
});

describe('worker bundle', () => {
  it('pulls in no Node-only module (pg, node:*, OpenTelemetry) — it runs in workerd', async () => {
    const { inputs } = await bundleExampleWorker();
    expect(
      inputs.filter((path) => path.includes('node_modules') || path.startsWith('node:')),
    ).toEqual([]);
    expect(inputs).toContain('src/cloudflare/queue-consumer.ts');
  });
});
