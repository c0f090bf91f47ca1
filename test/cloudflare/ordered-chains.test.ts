import { Miniflare } from 'miniflare';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  addD1UnorderedTopics,
  CloudflareQueuesPublisher,
  createScheduledDispatcher,
  D1_MIGRATIONS,
  D1OutboxStore,
  enqueue,
  listD1UnorderedTopics,
  migrateD1,
  removeD1UnorderedTopics,
  repairD1Heads,
  type D1Db,
  type QueueSendRequest,
} from '../../src/cloudflare/index.js';
import { claimHeadsSql, claimSql } from '../../src/sql/sqlite/claim.js';
import type { OutgoingMessage, PublishOutcome, Publisher } from '../../src/publishers/publisher.js';
import { httpD1 } from './helpers/http-d1.js';
import { bundleExampleWorker } from './helpers/worker-bundle.js';

/**
 * Issue 16 on D1 (migration 2): a claim reads rows in proportion to its batch, never the rows
 * queued behind a head — measured with D1's own `meta.rows_read` — and a hot aggregate drains in
 * runs sent in order that stop at their first failure. One Miniflare (workerd's D1) for the file.
 */
let mf: Miniflare;
let db: D1Db;

/** A database of the Worker, reached over HTTP (helpers/http-d1.ts says why). */
function database(binding: string): D1Db {
  return httpD1((url, init) => mf.dispatchFetch(url, init), `http://d1.test/?binding=${binding}`);
}

beforeAll(async () => {
  const { script } = await bundleExampleWorker('test/cloudflare/helpers/d1-worker.ts');
  mf = new Miniflare({
    modules: true,
    script,
    compatibilityDate: '2025-01-01',
    compatibilityFlags: ['nodejs_compat'],
    d1Databases: ['DB', 'OLD'],
  });
  db = database('DB');
  await migrateD1(db);
});

afterAll(async () => {
  await mf?.dispose();
});

// Every test starts from an empty outbox, so a claim sees only the test's own rows.
beforeEach(async () => {
  await db.batch(
    ['outbox', 'outbox_aggregates', 'outbox_unordered_topics', 'outbox_maintenance'].map((t) =>
      db.prepare(`DELETE FROM ${t}`),
    ),
  );
});

const noJitter = { baseMs: 60_000, maxMs: 60_000, jitterMs: 0 };

async function write(aggregateId: string, count: number, topic = 'payment.charge') {
  await db.batch(
    enqueue(
      db,
      Array.from({ length: count }, (_, n) => ({ topic, aggregateId, payload: { n: n + 1 } })),
    ),
  );
}

async function rows(aggregateId: string) {
  const { results } = await db
    .prepare(
      `SELECT sequence, ordered, ready, attempts, available_at, dispatched_at, dead_lettered_at,
              last_error, lease_owner
         FROM outbox WHERE aggregate_id = ? ORDER BY sequence`,
    )
    .bind(aggregateId)
    .all<{
      sequence: number;
      ordered: number;
      ready: number;
      attempts: number;
      available_at: number;
      dispatched_at: number | null;
      dead_lettered_at: number | null;
      last_error: string | null;
      lease_owner: string | null;
    }>();
  return results;
}

/**
 * `count` more pending ordered messages behind an aggregate's existing ones, in one INSERT ...
 * SELECT rather than 2 × `count` statements of `enqueue`, with the columns the writer gives a
 * message that is not its aggregate's head (the test checks the writer agrees).
 */
async function fillBehind(aggregateId: string, count: number) {
  const last = await db
    .prepare('SELECT last_sequence AS n FROM outbox_aggregates WHERE aggregate_id = ?')
    .bind(aggregateId)
    .first<{ n: number }>();
  const from = Number(last?.n ?? 0);
  await db.batch([
    db
      .prepare(
        `INSERT INTO outbox (message_id, aggregate_id, topic, payload, sequence, created_at,
                             available_at, ordered, ready)
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?3)
         SELECT ?1 || '-' || (?2 + i), ?1, 'payment.charge', '{}', ?2 + i, 0, 0, 1, 0 FROM n`,
      )
      .bind(aggregateId, from, count),
    db
      .prepare('UPDATE outbox_aggregates SET last_sequence = ? WHERE aggregate_id = ?')
      .bind(from + count, aggregateId),
  ]);
}

/** One claim as the store sends it, with D1's count of the rows it read. */
async function measuredClaim(owner: string, now: number, batchSize: number) {
  const result = await db
    .prepare(claimSql)
    .bind(owner, now, 60_000, batchSize)
    .all<{ rowId: number; aggregateId: string; sequence: number }>();
  return { claimed: result.results, rowsRead: Number(result.meta?.rows_read) };
}

function recording(
  decide: (m: OutgoingMessage) => PublishOutcome = () => ({ status: 'published' }),
  ordersWithinCall = false,
): Publisher & { calls: string[][] } {
  const calls: string[][] = [];
  return {
    calls,
    ordersWithinCall,
    async publish(messages) {
      calls.push(messages.map((m) => `${m.aggregateId}#${m.sequence}`));
      return messages.map(decide);
    },
  };
}

describe('the D1 writer decides order and readiness once, when a message is written', () => {
  it('marks only the head of an ordered aggregate ready, and unordered messages always', async () => {
    await write('w:1', 3);
    await db.batch(
      enqueue(db, [
        { topic: 'payment.charge', aggregateId: 'w:1', payload: 4, ordered: false },
        { topic: 'mail.send', aggregateId: 'w:1', payload: 5 },
      ]),
    );
    expect((await rows('w:1')).map((r) => [r.sequence, r.ordered, r.ready])).toEqual([
      [1, 1, 1],
      [2, 1, 0],
      [3, 1, 0],
      [4, 0, 1],
      [5, 1, 0],
    ]);
  });

  it('takes unordered topics from outbox_unordered_topics at write time, not from a dispatcher', async () => {
    expect(await addD1UnorderedTopics(db, ['audit.*', 'odd?[x]'])).toEqual(['audit.*', 'odd?[x]']);
    expect(await addD1UnorderedTopics(db, ['audit.*'])).toEqual([]);
    await db.batch(
      enqueue(db, [
        { topic: 'order.placed', aggregateId: 'w:2', payload: 1 },
        { topic: 'audit.order', aggregateId: 'w:2', payload: 2 },
        { topic: 'audit.order', aggregateId: 'w:2', payload: 3, ordered: true },
        { topic: 'oddA[x]', aggregateId: 'w:2', payload: 4 }, // `?` and `[` are literal
        { topic: 'odd?[x]', aggregateId: 'w:2', payload: 5 },
      ]),
    );
    expect((await rows('w:2')).map((r) => [r.sequence, r.ordered, r.ready])).toEqual([
      [1, 1, 1],
      [2, 0, 1],
      [3, 1, 0],
      [4, 1, 0],
      [5, 0, 1],
    ]);
    expect(await listD1UnorderedTopics(db)).toEqual(['audit.*', 'odd?[x]']);
    expect(await removeD1UnorderedTopics(db, ['audit.*', 'odd?[x]'])).toHaveLength(2);
    expect(await listD1UnorderedTopics(db)).toEqual([]);
  });

  it('a dispatcher declares its unorderedTopics for messages written after, whichever dispatcher sends them', async () => {
    await write('w:3', 1, 'digest.daily'); // written before the declaration: ordered
    await createScheduledDispatcher({
      db,
      publisher: recording(),
      unorderedTopics: ['digest.*'],
      now: () => 0, // nothing is due at time 0: the run only declares and finds nothing
    }).run();
    await write('w:3', 1, 'digest.daily');
    expect((await rows('w:3')).map((r) => [r.ordered, r.ready])).toEqual([
      [1, 1],
      [0, 1],
    ]);
    await removeD1UnorderedTopics(db, ['digest.*']);
  });
});

describe('a claim reads rows in proportion to its batch, not the backlog', () => {
  it('20,000 messages behind a dead head and 20,000 behind a backing-off head cost it nothing', async () => {
    const t0 = 3_000_000_000_000;
    // 200 heads, no blocked backlog yet: the reference figure.
    for (let i = 0; i < 200; i += 100)
      await db.batch(
        Array.from({ length: 100 }, (_, k) =>
          enqueue(db, { topic: 't', aggregateId: `ref:${i + k}`, payload: 1 }, { now: () => t0 }),
        ).flat(),
      );
    const reference = await measuredClaim('ref', t0, 200);
    expect(reference.claimed).toHaveLength(200);
    await new D1OutboxStore(db, () => t0).settle(
      'ref',
      reference.claimed.map((r) => ({ rowId: String(r.rowId), kind: 'published' as const })),
    );

    // A dead head under `hold`, and a head backing off for an hour, made by the dispatcher.
    const t1 = t0 + 1_000;
    await db.batch([
      ...enqueue(db, { topic: 't', aggregateId: 'blocked:dead', payload: 1 }, { now: () => t1 }),
      ...enqueue(db, { topic: 't', aggregateId: 'blocked:retry', payload: 1 }, { now: () => t1 }),
    ]);
    const failing = await createScheduledDispatcher({
      db,
      publisher: recording((m) =>
        m.aggregateId === 'blocked:dead'
          ? { status: 'permanent', error: 'rejected' }
          : { status: 'retryable', error: 'down' },
      ),
      backoff: { baseMs: 3_600_000, maxMs: 3_600_000, jitterMs: 0 },
      now: () => t1,
    }).run();
    expect(failing).toMatchObject({ deadLettered: 1, retried: 1 });
    await fillBehind('blocked:dead', 20_000);
    await fillBehind('blocked:retry', 20_000);
    // What the writer gives the next message behind a blocked head (the fill imitates it).
    await db.batch(
      enqueue(db, { topic: 't', aggregateId: 'blocked:dead', payload: 1 }, { now: () => t1 }),
    );
    expect(
      await db
        .prepare(
          "SELECT ready FROM outbox WHERE aggregate_id = 'blocked:dead' AND sequence = 20002",
        )
        .first(),
    ).toEqual({ ready: 0 });

    const t2 = t1 + 1_000;
    for (let i = 0; i < 200; i += 100)
      await db.batch(
        Array.from({ length: 100 }, (_, k) =>
          enqueue(db, { topic: 't', aggregateId: `other:${i + k}`, payload: 1 }, { now: () => t2 }),
        ).flat(),
      );
    const blocked = await measuredClaim('blocked', t2, 200);
    console.log(
      `[D1 claim] 200 heads: ${reference.rowsRead} rows read; the same with 40,002 messages ` +
        `behind a dead and a backing-off head: ${blocked.rowsRead} rows read ` +
        `(the claim before migration 2: 41,398 with 20,000 behind a dead head)`,
    );
    expect(blocked.claimed.map((r) => r.aggregateId).sort()).toEqual(
      Array.from({ length: 200 }, (_, i) => `other:${i}`).sort(),
    );
    // Bounded by the batch: within a few rows of the same claim without any blocked backlog
    // (the dead and backing-off heads are not even in the claim's index).
    expect(blocked.rowsRead).toBeLessThanOrEqual(reference.rowsRead + 20);
    expect(blocked.rowsRead).toBeLessThan(15 * 200);
    await new D1OutboxStore(db, () => t2).settle(
      'blocked',
      blocked.claimed.map((r) => ({ rowId: String(r.rowId), kind: 'published' as const })),
    );

    // Once the retry is due, its aggregate drains in runs; a claim still reads only its batch.
    const t3 = t1 + 3_600_000;
    const run = await measuredClaim('run', t3, 200);
    console.log(`[D1 claim] a run of 200 on an aggregate 20,001 deep: ${run.rowsRead} rows read`);
    expect(run.claimed.map((r) => r.sequence).sort((a, b) => a - b)).toEqual(
      Array.from({ length: 200 }, (_, i) => i + 1),
    );
    expect(new Set(run.claimed.map((r) => r.aggregateId))).toEqual(new Set(['blocked:retry']));
    expect(run.rowsRead).toBeLessThan(15 * 200);
  }, 60_000);

  it('claims heads only while the heads alone fill the batch, and takes runs again when there is room', async () => {
    const t0 = 3_100_000_000_000;
    // 12 aggregates of 3 messages, batch 10: 12 heads fill a batch and leave no run a share.
    for (let a = 0; a < 12; a++) await write(`busy:${a}`, 3);
    await db.batch(
      Array.from({ length: 12 }, (_, a) =>
        db
          .prepare('UPDATE outbox SET ready = 1 WHERE aggregate_id = ? AND sequence = 1')
          .bind(`busy:${a}`),
      ),
    );
    const sent: string[] = [];
    const recorded: D1Db = {
      prepare: (sql) => {
        sent.push(sql);
        return db.prepare(sql);
      },
      batch: (statements) => db.batch(statements),
    };
    const store = new D1OutboxStore(recorded, () => t0);
    const claims: { statement: string; messages: number; rowsRead?: number }[] = [];
    for (let i = 1; ; i++) {
      sent.length = 0;
      const messages = await store.claim({ owner: `d#${i}`, batchSize: 10, leaseMs: 60_000 });
      if (messages.length === 0) break;
      const statement = sent.includes(claimSql)
        ? 'runs'
        : sent.includes(claimHeadsSql)
          ? 'heads'
          : '?';
      claims.push({ statement, messages: messages.length });
      await store.settle(
        `d#${i}`,
        messages.map((m) => ({ rowId: m.rowId, kind: 'published' as const })),
      );
    }
    expect(claims).toEqual([
      { statement: 'runs', messages: 10 },
      { statement: 'heads', messages: 10 },
      { statement: 'heads', messages: 10 },
      { statement: 'heads', messages: 2 },
      { statement: 'runs', messages: 4 },
    ]);
    const left = await db
      .prepare('SELECT count(*) AS n FROM outbox WHERE dispatched_at IS NULL')
      .first<{ n: number }>();
    expect(Number(left?.n)).toBe(0);
    // What heads only saves on D1's bill: the same 200 heads read with each statement.
    const rowsRead = async (sql: string, prefix: string) => {
      for (let i = 0; i < 200; i += 100)
        await db.batch(
          Array.from({ length: 100 }, (_, k) =>
            enqueue(
              db,
              { topic: 't', aggregateId: `${prefix}:${i + k}`, payload: 1 },
              { now: () => t0 },
            ),
          ).flat(),
        );
      const result = await db.prepare(sql).bind(prefix, t0, 60_000, 200).all<{ rowId: number }>();
      expect(result.results).toHaveLength(200);
      await new D1OutboxStore(db, () => t0).settle(
        prefix,
        result.results.map((r) => ({ rowId: String(r.rowId), kind: 'published' as const })),
      );
      return Number(result.meta?.rows_read);
    };
    const withRuns = await rowsRead(claimSql, 'with-runs');
    const headsOnly = await rowsRead(claimHeadsSql, 'heads-only');
    console.log(`[D1 claim] 200 heads: ${withRuns} rows read with runs, ${headsOnly} heads only`);
    expect(headsOnly).toBeLessThan(withRuns);
  }, 60_000);
});

describe('ordered runs', () => {
  it('shares the batch left after the heads between the runs, never more than the batch', async () => {
    const t0 = 3_900_000_000_000;
    await db.batch(
      ['share:1', 'share:2', 'share:3'].flatMap((aggregateId) =>
        enqueue(
          db,
          Array.from({ length: 10 }, (_, n) => ({ topic: 't', aggregateId, payload: n })),
          { now: () => t0 },
        ),
      ),
    );
    const { claimed } = await measuredClaim('share', t0, 10);
    // Three heads, then (10 - 3) / 3 = 2 more behind each.
    const perAggregate = new Map<string, number[]>();
    for (const r of claimed)
      perAggregate.set(r.aggregateId, [...(perAggregate.get(r.aggregateId) ?? []), r.sequence]);
    expect([...perAggregate.values()].map((s) => s.sort((a, b) => a - b))).toEqual([
      [1, 2, 3],
      [1, 2, 3],
      [1, 2, 3],
    ]);
  });

  it('a run whose third message fails: 1-2 sent, 3 backs off, 4.. released with attempts unchanged; order kept', async () => {
    const t0 = 4_000_000_000_000;
    await db.batch(
      enqueue(
        db,
        Array.from({ length: 6 }, (_, n) => ({
          topic: 'payment.charge',
          aggregateId: 'run:1',
          payload: { n },
        })),
        { now: () => t0 },
      ),
    );
    let failThird = true;
    const publisher = recording((m) =>
      failThird && m.sequence === 3
        ? { status: 'retryable', error: 'broker hiccup' }
        : { status: 'published' },
    );
    let now = t0;
    const dispatcher = createScheduledDispatcher({
      db,
      publisher,
      batchSize: 10,
      backoff: noJitter,
      now: () => now,
    });
    const first = await dispatcher.run();
    // One claim took the whole run; it went one call at a time and stopped at the failure.
    expect(publisher.calls).toEqual([['run:1#1'], ['run:1#2'], ['run:1#3']]);
    expect(first).toMatchObject({ batches: 1, claimed: 6, published: 2, retried: 1, released: 3 });
    const after = await rows('run:1');
    expect(after.map((r) => r.dispatched_at !== null)).toEqual([
      true,
      true,
      false,
      false,
      false,
      false,
    ]);
    expect(after.map((r) => r.attempts)).toEqual([1, 1, 1, 0, 0, 0]);
    expect(after.map((r) => r.lease_owner)).toEqual([null, null, null, null, null, null]);
    expect(after[2]).toMatchObject({ available_at: t0 + 60_000, last_error: 'broker hiccup' });
    expect(after[3]!.last_error).toBeNull();
    // 3 is the head now; 4.. wait behind it, out of the claim's index.
    expect(after.map((r) => r.ready)).toEqual([1, 0, 1, 0, 0, 0]);

    // While 3 backs off nothing of the aggregate is claimable.
    now = t0 + 59_999;
    expect(await dispatcher.run()).toMatchObject({ claimed: 0 });

    failThird = false;
    now = t0 + 60_000;
    publisher.calls.length = 0;
    expect(await dispatcher.run()).toMatchObject({ published: 4, released: 0 });
    expect(publisher.calls).toEqual([['run:1#3'], ['run:1#4'], ['run:1#5'], ['run:1#6']]);
    expect((await rows('run:1')).map((r) => r.attempts)).toEqual([1, 1, 2, 1, 1, 1]);
  });

  it('the Queues publisher sends a run in one sendBatch and stops the aggregate at a failed chunk', async () => {
    const t0 = 4_100_000_000_000;
    await db.batch([
      ...enqueue(
        db,
        Array.from({ length: 5 }, (_, n) => ({ topic: 'q', aggregateId: 'run:q', payload: n })),
        { now: () => t0 },
      ),
      ...enqueue(db, { topic: 'q', aggregateId: 'run:other', payload: 0 }, { now: () => t0 }),
    ]);
    const sent: number[][] = [];
    let failing = true;
    const queue = {
      async sendBatch(batch: Iterable<QueueSendRequest>) {
        const sequences = [...batch].map((r) => (r.body as { sequence: number }).sequence);
        // One message per chunk: the chunk carrying run:q #3 fails while `failing`.
        if (failing && sent.length === 2) {
          sent.push([]);
          throw new Error('queue unavailable');
        }
        sent.push(sequences);
      },
    };
    let now = t0;
    const dispatcher = (maxBatchMessages: number) =>
      createScheduledDispatcher({
        db,
        publisher: new CloudflareQueuesPublisher(queue, { maxBatchMessages }),
        backoff: noJitter,
        now: () => now,
      });
    const first = await dispatcher(1).run();
    // run:q 1, 2 accepted; 3's chunk failed; 4, 5 never reached the queue; run:other still went.
    expect(sent).toEqual([[1], [2], [], [1]]);
    expect(first).toMatchObject({ claimed: 6, published: 3, retried: 1, released: 2 });
    expect((await rows('run:q')).map((r) => [r.attempts, r.dispatched_at !== null])).toEqual([
      [1, true],
      [1, true],
      [1, false],
      [0, false],
      [0, false],
    ]);
    failing = false;
    sent.length = 0;
    now = t0 + 60_000;
    expect(await dispatcher(100).run()).toMatchObject({ batches: 1, published: 3 });
    expect(sent).toEqual([[3, 4, 5]]); // the rest of the run in one sendBatch, in order
  });

  it('a hot aggregate drains a batch per claim, and a dead letter under skip lets its successor go', async () => {
    const t0 = 4_200_000_000_000;
    await db.batch(
      enqueue(
        db,
        Array.from({ length: 250 }, (_, n) => ({ topic: 'h', aggregateId: 'run:hot', payload: n })),
        { now: () => t0 },
      ),
    );
    // Orders within a call as the contract says: after a failure, nothing more of the aggregate.
    const calls: number[] = [];
    const accepted: number[] = [];
    const publisher: Publisher = {
      ordersWithinCall: true,
      async publish(messages) {
        calls.push(messages.length);
        let failed = false;
        return messages.map((m): PublishOutcome => {
          if (failed) return { status: 'retryable', error: 'not sent' };
          if (m.sequence === 120) {
            failed = true;
            return { status: 'permanent', error: 'bad payload' };
          }
          accepted.push(m.sequence);
          return { status: 'published' };
        });
      },
    };
    const summary = await createScheduledDispatcher({
      db,
      publisher,
      batchSize: 100,
      deadLetterPolicy: 'skip',
      now: () => t0,
    }).run();
    // 120 dead (skip): 121..200 were released, then went out after it, in order.
    expect(calls).toEqual([100, 100, 100, 30]);
    expect(summary).toMatchObject({ batches: 4, published: 249, deadLettered: 1, released: 80 });
    expect(accepted).toEqual(Array.from({ length: 250 }, (_, i) => i + 1).filter((n) => n !== 120));
    const dead = (await rows('run:hot'))[119]!;
    expect(dead).toMatchObject({ ordered: 0, last_error: 'permanent: bad payload' });
  });
});

describe('upgrading a D1 outbox from version 1', () => {
  it('keeps a pending backlog in order, and the head repair frees what an older Worker settled', async () => {
    const old = database('OLD');
    await old.batch(D1_MIGRATIONS[0]!.statements.map((sql) => old.prepare(sql)));
    const v1Insert = (aggregateId: string, sequence: number) =>
      old
        .prepare(
          `INSERT INTO outbox (message_id, aggregate_id, topic, payload, sequence, created_at, available_at)
           VALUES (?1, ?2, 't', '{}', ?3, 0, 0)`,
        )
        .bind(`${aggregateId}-${sequence}`, aggregateId, sequence);
    await old.batch([1, 2, 3].flatMap((s) => [v1Insert('up:a', s), v1Insert('up:b', s)]));
    await old.prepare("INSERT INTO outbox_aggregates VALUES ('up:a', 3), ('up:b', 3)").run();

    // Two Workers migrating at once: both succeed, the migration runs once.
    const applied = await Promise.all([migrateD1(old), migrateD1(old)]);
    expect(applied.flat().filter((version) => version === 2)).toEqual([2]);
    expect(await migrateD1(old)).toEqual([]);
    const ready = await old
      .prepare('SELECT aggregate_id, sequence FROM outbox WHERE ready = 1 ORDER BY 1, 2')
      .all();
    expect(ready.results).toEqual([
      { aggregate_id: 'up:a', sequence: 1 },
      { aggregate_id: 'up:b', sequence: 1 },
    ]);

    // An older Worker still running after the migration settles up:a #1 without marking #2.
    await old.prepare("UPDATE outbox SET dispatched_at = 1 WHERE message_id = 'up:a-1'").run();
    const store = new D1OutboxStore(old);
    const claim = (owner: string) => store.claim({ owner, batchSize: 10, leaseMs: 60_000 });
    const first = await claim('c1');
    expect(first.map((m) => `${m.aggregateId}#${m.sequence}`).sort()).toEqual([
      'up:b#1',
      'up:b#2',
      'up:b#3',
    ]);
    expect(await repairD1Heads(old)).toBe(1);
    expect(await repairD1Heads(old)).toBe(0);
    const second = await claim('c2');
    expect(second.map((m) => `${m.aggregateId}#${m.sequence}`).sort()).toEqual([
      'up:a#2',
      'up:a#3',
    ]);
  });

  it('runs the repair from the dispatcher at most once per interval, shared through D1', async () => {
    const t0 = 4_300_000_000_000;
    await write('rep:1', 2);
    await db.prepare("UPDATE outbox SET ready = 0 WHERE aggregate_id = 'rep:1'").run();
    const run = (now: number) =>
      createScheduledDispatcher({
        db,
        publisher: recording(),
        repairIntervalMs: 600_000,
        now: () => now,
      }).run();
    await db.prepare("DELETE FROM outbox_maintenance WHERE task = 'repair-heads'").run();
    expect(await run(t0)).toMatchObject({ repairedHeads: 1, published: 2 });
    await db
      .prepare("UPDATE outbox SET ready = 0, dispatched_at = NULL WHERE aggregate_id = 'rep:1'")
      .run();
    expect(await run(t0 + 599_999)).toMatchObject({ repairedHeads: 0, published: 0 });
    expect(await run(t0 + 600_000)).toMatchObject({ repairedHeads: 1, published: 2 });
  });
});
