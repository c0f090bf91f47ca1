import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  createDispatcher,
  fromPg,
  PgOutboxStore,
  type OutgoingMessage,
  type Publisher,
  type SqlExecutor,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { explainedClaim, rowsRead } from '../../helpers/explain.js';
import { blocksOf, holdSnapshot, noopPublisher } from '../../helpers/held-snapshot.js';
import { insertWithTriggersOff, resetOutbox } from '../../helpers/outbox-fixtures.js';

/**
 * The runs-first claim (migration 019, sql/runs-first-claim.ts): a few aggregates' heads with the
 * runs behind them, then more heads while the batch has room. What it takes, that order holds,
 * that what it reads follows the batch, and that a store on a schema without it claims as before.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});
beforeEach(async () => {
  await resetOutbox(db.pool);
  await db.pool.query('TRUNCATE outbox_unordered_topics');
});

/** `depth` messages on each of `aggregates` aggregates, written in sequence order. */
async function chains(aggregates: number, depth: number, topic = 'payment.charge') {
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload)
     SELECT 'agg-' || (g % $1::int), $3, jsonb_build_object('g', g)
     FROM generate_series(0, $1::int * $2::int - 1) g ORDER BY g`,
    [aggregates, depth, topic],
  );
}

const claim = (maxHeads?: number, batchSize = 200) =>
  new PgOutboxStore(fromPg(db.pool)).claim({
    owner: `t#${Math.random()}`,
    batchSize,
    leaseMs: 30_000,
    maxHeads,
  });

/** Per aggregate, the sequences claimed, in the order returned. */
function byAggregate(messages: OutgoingMessage[]) {
  const out = new Map<string, number[]>();
  for (const m of messages) out.set(m.aggregateId, [...(out.get(m.aggregateId) ?? []), m.sequence]);
  return out;
}

/** A fast publisher that records, per aggregate, the sequences it published, in order. */
function recordingPublisher(seen: Map<string, number[]>): Publisher {
  return {
    publish: async (messages) =>
      messages.map((m) => {
        seen.set(m.aggregateId, [...(seen.get(m.aggregateId) ?? []), m.sequence]);
        return { status: 'published' as const };
      }),
  };
}

/** One runs-first claim of 200 (at most 20 heads) under EXPLAIN (ANALYZE, BUFFERS), rolled back. */
async function explainRunsFirstClaim() {
  const { plan, claimed } = await explainedClaim(db.pool, {
    owner: 'explain#1',
    batchSize: 200,
    leaseMs: 30_000,
    maxHeads: 20,
  });
  return { claimed: claimed.length, rows: rowsRead(plan), blocks: blocksOf(plan) };
}

/** 100,000 messages on aggregate `deep`, loaded as the trigger writes them; its head dead-lettered if `blocked`. */
async function deepAggregate(blocked: boolean) {
  await insertWithTriggersOff(db.pool, [
    {
      text: `INSERT INTO outbox (aggregate_id, topic, payload, sequence, ordered, ready, dead_lettered_at)
       SELECT 'deep', 'payment.charge', '{}'::jsonb, g, true, g = 1,
              CASE WHEN $1::boolean AND g = 1 THEN now() END
       FROM generate_series(1, 100000) g`,
      values: [blocked],
    },
    {
      text: `INSERT INTO outbox_aggregates (aggregate_id, last_sequence) VALUES ('deep', 100000)`,
    },
  ]);
}

describe('the runs-first claim', () => {
  it('takes at most maxHeads aggregates, each a run from its head, and fills the batch', async () => {
    await chains(50, 20);
    const runs = await claim(20);
    expect(runs).toHaveLength(200);
    const taken = byAggregate(runs);
    expect(taken.size).toBe(20);
    for (const [aggregate, sequences] of taken) {
      // A run: the head and the messages right behind it, consecutive.
      expect(sequences, aggregate).toEqual(Array.from({ length: 10 }, (_, i) => i + 1));
    }
  });

  it('heads first (no maxHeads) spreads the same batch over every aggregate', async () => {
    await chains(50, 20);
    const heads = await claim();
    expect(heads).toHaveLength(200);
    expect(byAggregate(heads).size).toBe(50);
  });

  it('short chains and unordered messages: more heads fill what the runs leave', async () => {
    await chains(150, 1);
    await db.pool.query(`INSERT INTO outbox_unordered_topics (pattern) VALUES ('mail.%')`);
    await chains(100, 1, 'mail.send');
    const claimed = await claim(20);
    expect(claimed).toHaveLength(200);
    // No message twice (a head of the first part must not come back from the second walk).
    expect(new Set(claimed.map((m) => m.rowId)).size).toBe(200);
  });

  it('never takes a message whose predecessor is pending, leased by another claim', async () => {
    await chains(30, 10);
    const first = await claim(5, 20); // 5 runs of 4
    expect(byAggregate(first).size).toBe(5);
    const second = await claim(20);
    const firstAggregates = new Set(first.map((m) => m.aggregateId));
    for (const m of second) expect(firstAggregates.has(m.aggregateId), m.aggregateId).toBe(false);
  });

  it('a dispatcher draining runs first publishes every aggregate in sequence order', async () => {
    await chains(40, 25);
    const seen = new Map<string, number[]>();
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      claimShape: 'runs-first',
      batchSize: 100,
      publisher: recordingPublisher(seen),
    });
    expect((await dispatcher.drain()).published).toBe(1_000);
    expect(seen.size).toBe(40);
    for (const [aggregate, sequences] of seen)
      expect(sequences, aggregate).toEqual(Array.from({ length: 25 }, (_, i) => i + 1));
  });

  it('reads about its batch beside 100,000 messages queued behind one head (EXPLAIN ANALYZE)', async () => {
    await deepAggregate(false);
    await chains(500, 4);
    await db.pool.query('ANALYZE outbox');
    const read = await explainRunsFirstClaim();
    console.log(`runs-first claim of 200 beside a deep aggregate: ${JSON.stringify(read)}`);
    expect(read.claimed).toBe(200);
    expect(read.rows).toBeGreaterThan(0);
    expect(read.rows).toBeLessThan(1_500);
  });

  it('the same with that head dead-lettered under hold: the 100,000 behind it are not read', async () => {
    await deepAggregate(true);
    await chains(500, 4);
    await db.pool.query('ANALYZE outbox');
    const read = await explainRunsFirstClaim();
    console.log(`runs-first claim of 200 beside a blocked aggregate: ${JSON.stringify(read)}`);
    expect(read.claimed).toBe(200);
    expect(read.rows).toBeLessThan(1_500);
  });

  it('reads the same after 20,000 messages were dispatched runs first under a held snapshot', async () => {
    const holder = await holdSnapshot(db.url);
    try {
      const drainAll = () =>
        createDispatcher({
          executor: fromPg(db.pool),
          claimShape: 'runs-first',
          publisher: noopPublisher,
        }).drain();
      await chains(500, 4);
      expect((await drainAll()).published).toBe(2_000);
      await chains(500, 4);
      const shallow = await explainRunsFirstClaim();
      expect((await drainAll()).published).toBe(2_000);
      await chains(500, 40);
      expect((await drainAll()).published).toBe(20_000);
      await chains(500, 4);
      const deep = await explainRunsFirstClaim();
      const why = JSON.stringify({ shallow, deep });
      console.log(`runs-first claim under a held snapshot: ${why}`);
      expect(deep.claimed, why).toBe(200);
      expect(deep.rows, why).toBeLessThan(shallow.rows * 1.5 + 100);
      expect(deep.blocks, why).toBeLessThan(shallow.blocks * 1.5 + 200);
    } finally {
      await holder.release();
    }
  });

  it('on a schema without migration 019 the store claims heads first, and keeps doing so', async () => {
    await chains(50, 4);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`DROP FUNCTION outbox_claim(text, int, float8, text, int)`);
      let runsFirstCalls = 0;
      const counting: SqlExecutor = {
        query: async <Row>(text: string, values?: readonly unknown[]) => {
          if (text.includes('$5::int')) runsFirstCalls++;
          return (await client.query(text, [...(values ?? [])]).catch(async (error: unknown) => {
            // The failed call aborted the transaction: roll back to before it, as autocommit would.
            await client.query('ROLLBACK TO SAVEPOINT before_claim');
            throw error;
          })) as unknown as { rows: Row[] };
        },
      };
      await client.query('SAVEPOINT before_claim');
      const store = new PgOutboxStore(counting);
      const first = await store.claim({
        owner: 'old#1',
        batchSize: 100,
        leaseMs: 30_000,
        maxHeads: 10,
      });
      expect(first).toHaveLength(100);
      expect(byAggregate(first).size).toBe(50);
      await store.claim({ owner: 'old#2', batchSize: 100, leaseMs: 30_000, maxHeads: 10 });
      expect(runsFirstCalls).toBe(1);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });

  it('a dispatcher left on auto behind a fast publisher switches to runs first, order held', async () => {
    await chains(100, 30);
    const asked: (number | undefined)[] = [];
    const pgStore = new PgOutboxStore(fromPg(db.pool));
    const seen = new Map<string, number[]>();
    const dispatcher = createDispatcher({
      store: {
        claim: (request) => {
          asked.push(request.maxHeads);
          return pgStore.claim(request);
        },
        settle: (owner, settlements, request) => pgStore.settle(owner, settlements, request),
        release: (owner, rowIds) => pgStore.release(owner, rowIds),
      },
      publisher: recordingPublisher(seen),
    });
    expect((await dispatcher.drain()).published).toBe(3_000);
    // Heads first until a publish call was timed, runs first after.
    expect(asked[0]).toBeUndefined();
    expect(asked.slice(1).filter((m) => m === 10).length, String(asked)).toBeGreaterThan(0);
    for (const [aggregate, sequences] of seen)
      expect(sequences, aggregate).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
  });
});
