import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OutboxDuplicateError } from '../../../src/core/errors.js';
import type { OutboxMessage } from '../../../src/core/message.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import type {
  OutgoingMessage,
  PublishOutcome,
  Publisher,
} from '../../../src/publishers/publisher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createOutbox } from '../../../src/writer/create-outbox.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { inTransaction as inPoolTransaction } from '../../helpers/transaction.js';

/**
 * The lanes writer's delays, dedupe keys and shadow messages (migration 026), with the claim
 * engine's semantics (docs/writing.md, docs/dedupe.md; claim-engine tests:
 * test/integration/writer/dedupe.test.ts).
 */
const outbox = createOutbox({ engine: 'lanes' });
const claims = createOutbox();
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

/** `fn` in a transaction on its own connection, committed. */
const inTransaction = <T>(fn: (client: pg.PoolClient) => Promise<T>) =>
  inPoolTransaction(db.pool, fn);

const write = (messages: OutboxMessage[]) =>
  inTransaction((c) => outbox.enqueue(fromPg(c), messages));

const msg = (aggregateId: string, n: number, extra: Partial<OutboxMessage> = {}) =>
  ({ topic: 'mail.send', aggregateId, payload: { n }, ...extra }) as OutboxMessage;

/** Records when each message was published (ms since the epoch), with failures injected. */
class TimedPublisher implements Publisher {
  readonly published: { message: OutgoingMessage; at: number }[] = [];
  constructor(
    readonly fail: (m: OutgoingMessage) => PublishOutcome | undefined = () => undefined,
  ) {}
  async publish(messages: readonly OutgoingMessage[]): Promise<PublishOutcome[]> {
    return messages.map((message) => {
      const failed = this.fail(message);
      if (failed) return failed;
      this.published.push({ message, at: Date.now() });
      return { status: 'published' };
    });
  }
  of(aggregateId: string) {
    return this.published.filter((p) => p.message.aggregateId === aggregateId);
  }
}

async function waitFor(condition: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > until) throw new Error('condition not reached');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** An aggregate id in the same lane as `aggregateId` (the lane is a hash of it). */
async function sameLane(aggregateId: string, prefix: string): Promise<string> {
  const { rows } = await db.pool.query<{ id: string }>(
    `SELECT $2 || g AS id FROM generate_series(1, 1000) g
     WHERE outbox_lane_of($2 || g) = outbox_lane_of($1) LIMIT 1`,
    [aggregateId, prefix],
  );
  return rows[0]!.id;
}

/** A running lanes dispatcher; a failure is retried after `retryMs` (a backoff: no route pause). */
const run = (publisher: Publisher, retryMs = 100) => {
  const dispatcher = createLaneDispatcher({
    executor: fromPg(db.pool),
    publisher,
    pollIntervalMs: 50,
    backoff: { baseMs: retryMs, maxMs: retryMs, jitterMs: 0 },
  });
  dispatcher.start();
  return dispatcher;
};

describe('lanes writer: delays', () => {
  it('a delayed message is not published before its time; its lane flows meanwhile', async () => {
    const other = await sameLane('late', 'flow-');
    const before = Date.now();
    await write([msg('late', 1, { delayMs: 1_500 }), msg(other, 1)]);
    const publisher = new TimedPublisher();
    const dispatcher = run(publisher);
    try {
      await waitFor(() => publisher.of(other).length === 1);
      expect(publisher.of('late')).toHaveLength(0);
      await waitFor(() => publisher.of('late').length === 1);
      expect(publisher.of('late')[0]!.at - before).toBeGreaterThanOrEqual(1_500);
      expect(publisher.of(other)[0]!.at - before).toBeLessThan(1_500);
    } finally {
      await dispatcher.stop();
    }
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM outbox_lane_parked WHERE aggregate_id IN ('late', $1)`,
      [other],
    );
    expect(rows[0].n).toBe(0);
  });

  it("an ordered aggregate's later messages wait behind its delayed one (G4); availableAt counts too", async () => {
    const before = Date.now();
    await write([
      msg('ordered', 1, { availableAt: new Date(before + 1_200) }),
      msg('ordered', 2),
      msg('ordered', 3),
      msg('unordered-past', 1, { availableAt: new Date(before - 60_000) }),
    ]);
    const publisher = new TimedPublisher();
    const dispatcher = run(publisher);
    try {
      await waitFor(() => publisher.of('unordered-past').length === 1);
      await waitFor(() => publisher.of('ordered').length === 3);
    } finally {
      await dispatcher.stop();
    }
    const ordered = publisher.of('ordered');
    expect(ordered.map((p) => p.message.sequence)).toEqual([1, 2, 3]);
    for (const p of ordered) expect(p.at - before).toBeGreaterThanOrEqual(1_200);
    expect(publisher.of('unordered-past')[0]!.at - before).toBeLessThan(1_200);
  });

  it('a delayed message parked behind a failure keeps its delay, and what follows it waits', async () => {
    let failures = 0;
    const publisher = new TimedPublisher((m) =>
      m.aggregateId === 'behind' && m.sequence === 1 && failures++ === 0
        ? { status: 'retryable', error: 'once' }
        : undefined,
    );
    await write([msg('behind', 1)]);
    const dispatcher = run(publisher, 500);
    try {
      await waitFor(() => failures === 1);
      // Read while the first is parked: parked behind it, with its own due time.
      const before = Date.now();
      await write([msg('behind', 2, { delayMs: 2_000 }), msg('behind', 3)]);
      await waitFor(() => publisher.of('behind').length === 3);
      const [first, second, third] = publisher.of('behind');
      expect([first, second, third].map((p) => p!.message.sequence)).toEqual([1, 2, 3]);
      expect(first!.at - before).toBeLessThan(2_000);
      expect(second!.at - before).toBeGreaterThanOrEqual(2_000);
      expect(third!.at).toBeGreaterThanOrEqual(second!.at);
    } finally {
      await dispatcher.stop();
    }
  });

  it('a delayed message read with an earlier one that then fails waits for it, however soon it is due', async () => {
    let failures = 0;
    const publisher = new TimedPublisher((m) =>
      m.aggregateId === 'two-heads' && m.sequence === 1 && failures++ === 0
        ? { status: 'retryable', error: 'once' }
        : undefined,
    );
    const dispatcher = run(publisher, 2_000);
    try {
      // Running and idle first, so that one read finds the three: the first is returned (and
      // fails), the second parked by the read as due in 500 ms, long before the retry.
      await dispatcher.onIdle();
      const before = Date.now();
      await write([
        msg('two-heads', 1),
        msg('two-heads', 2, { delayMs: 500 }),
        msg('two-heads', 3),
      ]);
      await waitFor(() => publisher.of('two-heads').length === 3);
      expect(Date.now() - before).toBeGreaterThanOrEqual(2_000);
    } finally {
      await dispatcher.stop();
    }
    expect(publisher.of('two-heads').map((p) => p.message.sequence)).toEqual([1, 2, 3]);
    expect(failures).toBeGreaterThanOrEqual(1);
  });
});

describe('lanes writer: delays above the horizon', () => {
  it('a delayed message read again while its lane waits for the horizon is published once', async () => {
    // A write transaction left open holds the horizon: the lane's position stays below what is
    // written after it, so every read returns to the delayed message, parked and then due.
    const holder = await db.pool.connect();
    await holder.query('BEGIN');
    await holder.query('SELECT pg_current_xact_id()');
    const publisher = new TimedPublisher();
    const dispatcher = run(publisher);
    try {
      await dispatcher.onIdle();
      // The second, not due for longer, keeps the lane on the row-by-row read meanwhile.
      await write([
        msg('above', 1, { ordered: false, delayMs: 300 }),
        msg('above', 2, { ordered: false, delayMs: 2_500 }),
      ]);
      await waitFor(() => publisher.of('above').length > 0);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      expect(publisher.of('above').map((p) => p.message.sequence)).toEqual([1]);
      await waitFor(() => publisher.of('above').length > 1);
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(publisher.of('above').map((p) => p.message.sequence)).toEqual([1, 2]);
    } finally {
      await dispatcher.stop();
      await holder.query('ROLLBACK');
      holder.release();
    }
  });
});

describe('lanes writer: dedupe keys', () => {
  const charge = (key: string, aggregateId = 'order:42', extra: Partial<OutboxMessage> = {}) =>
    msg(aggregateId, 1, { topic: 'payment.charge', dedupeKey: key, ...extra });
  const rowsOf = async (aggregateId: string) =>
    (
      await db.pool.query<{ message_id: string; sequence: string }>(
        'SELECT message_id::text, sequence::text FROM outbox_lane_messages WHERE aggregate_id = $1 ORDER BY id',
        [aggregateId],
      )
    ).rows;

  it('a second message with the key writes nothing, returns the first, and takes no sequence number', async () => {
    const first = await inTransaction((c) => outbox.enqueue(fromPg(c), charge('k:1', 'agg:k1')));
    expect(first).toMatchObject({ deduped: false, dedupeKey: 'k:1', sequence: 1 });
    const [again, next] = await inTransaction((c) =>
      outbox.enqueue(fromPg(c), [charge('k:1', 'agg:k1'), msg('agg:k1', 2)]),
    );
    expect(again).toEqual({ ...first, deduped: true });
    expect(next).toMatchObject({ deduped: false, sequence: 2 });
    expect(await rowsOf('agg:k1')).toEqual([
      { message_id: first.messageId, sequence: '1' },
      { message_id: next!.messageId, sequence: '2' },
    ]);
    const { rows } = await db.pool.query(
      `SELECT message_id::text, id::text, sequence::int FROM outbox_dedupe_keys WHERE dedupe_key = 'k:1'`,
    );
    expect(rows).toEqual([{ message_id: first.messageId, id: first.id, sequence: 1 }]);
  });

  it('within one call, a repeated key is answered with the first of the call', async () => {
    const results = await write([
      charge('k:batch', 'agg:b1'),
      msg('agg:b1', 2),
      charge('k:batch', 'agg:b2'),
    ]);
    expect(results.map((r) => [r.deduped, r.sequence])).toEqual([
      [false, 1],
      [false, 2],
      [true, 1],
    ]);
    expect(results[2]!.messageId).toBe(results[0]!.messageId);
    expect(await rowsOf('agg:b2')).toEqual([]);
  });

  it("onDuplicate: 'reject' throws and writes nothing of the call; the transaction stays usable", async () => {
    const first = await write([charge('k:reject', 'agg:r0')]);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const error = await outbox
        .enqueue(fromPg(client), [msg('agg:r1', 1), charge('k:reject', 'agg:r1')], {
          onDuplicate: 'reject',
        })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxDuplicateError);
      expect(error).toMatchObject({ dedupeKey: 'k:reject', messageId: first[0]!.messageId });
      const fresh = await outbox.enqueue(fromPg(client), charge('k:reject:2', 'agg:r1'), {
        onDuplicate: 'reject',
      });
      await client.query('COMMIT');
      expect(fresh).toMatchObject({ deduped: false, sequence: 1 });
    } finally {
      client.release();
    }
    expect((await rowsOf('agg:r1')).map((r) => r.sequence)).toEqual(['1']);
  });

  it('one key space with the claim engine: a key either engine wrote deduplicates on the other', async () => {
    const onClaims = await inTransaction((c) => claims.enqueue(fromPg(c), charge('k:both')));
    const onLanes = await inTransaction((c) => outbox.enqueue(fromPg(c), charge('k:both')));
    expect(onLanes).toEqual({ ...onClaims, deduped: true });
    const lanesFirst = await write([charge('k:both:2', 'agg:both')]);
    const claimsAfter = await inTransaction((c) =>
      claims.enqueue(fromPg(c), charge('k:both:2', 'agg:both')),
    );
    expect(claimsAfter).toMatchObject({ deduped: true, messageId: lanesFirst[0]!.messageId });
  });

  for (const end of ['COMMIT', 'ROLLBACK'] as const)
    it(`two connections race on one key, the first ends with ${end}: exactly one message`, async () => {
      const a = await db.pool.connect();
      const b = await db.pool.connect();
      const key = `k:race:${end}`;
      try {
        await a.query('BEGIN');
        await b.query('BEGIN');
        const first = await outbox.enqueue(fromPg(a), charge(key, `race:a:${end}`));
        let settled = false;
        const second = outbox
          .enqueue(fromPg(b), charge(key, `race:b:${end}`))
          .finally(() => (settled = true));
        // b waits on a's uncommitted key.
        await waitFor(async () => {
          const { rows } = await db.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'`,
          );
          return rows[0]!.n === 1;
        });
        expect(settled).toBe(false);
        await a.query(end);
        const answer = await second;
        await b.query('COMMIT');
        if (end === 'COMMIT') expect(answer).toEqual({ ...first, deduped: true });
        else expect(answer).toMatchObject({ deduped: false, sequence: 1 });
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM outbox_lane_messages WHERE aggregate_id LIKE $1`,
          [`race:_:${end}`],
        );
        expect(rows[0]!.n).toBe(1);
      } finally {
        a.release();
        b.release();
      }
    });
});

describe('lanes writer: shadow messages', () => {
  it('are settled without the publisher, in their place in the aggregate, from the lane and the parked path', async () => {
    await write([
      msg('shadow', 1),
      msg('shadow', 2, { shadow: true }),
      msg('shadow', 3),
      // Through the parked path: due later.
      msg('shadow-late', 1, { shadow: true, delayMs: 300 }),
      msg('shadow-late', 2, { delayMs: 300 }),
    ]);
    const publisher = new InMemoryPublisher();
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher,
      pollIntervalMs: 50,
    });
    dispatcher.start();
    try {
      await waitFor(() => publisher.published.some((m) => m.aggregateId === 'shadow-late'));
    } finally {
      await dispatcher.stop();
    }
    const seen = (id: string) =>
      publisher.published.filter((m) => m.aggregateId === id).map((m) => m.sequence);
    expect(seen('shadow')).toEqual([1, 3]);
    expect(seen('shadow-late')).toEqual([2]);
    expect(dispatcher.stats()).toMatchObject({ shadowed: 2 });
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM outbox_lane_parked WHERE aggregate_id LIKE 'shadow%'`,
    );
    expect(rows[0].n).toBe(0);
  });
});
