import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  createCdcDispatcher,
  parseLsn,
  readSlotLag,
  type CdcDispatcher,
  type CdcDispatcherOptions,
} from '../../../src/cdc/index.js';
import {
  fromPg,
  InMemoryPublisher,
  type OutgoingMessage,
  type SqlExecutor,
} from '../../../src/index.js';
import type { TestDatabase } from '../../helpers/database.js';
import { createLogicalTestDatabase } from '../../helpers/logical-database.js';
import { checkHistory, eventsInOrder, expectedOf } from '../../helpers/history.js';
import { enqueueCommitted, manyMessages, resetOutbox } from '../../helpers/outbox-fixtures.js';
import { dropSlots, slotState } from '../../fixtures/latency/cdc-helpers.js';

let db: TestDatabase;
let walLevel = '';
beforeAll(async () => {
  db = await createLogicalTestDatabase();
  walLevel = (await db.pool.query<{ wal_level: string }>('SHOW wal_level')).rows[0]!.wal_level;
});
afterAll(async () => {
  // drop() also stops a private server: it must run whatever happened before it.
  try {
    if (db) await dropSlots(db.pool, db.name);
  } finally {
    await db?.drop();
  }
});

let slotNumber = 0;
let slot = '';
const running: CdcDispatcher[] = [];
beforeEach(async () => {
  await resetOutbox(db.pool);
  slot = `ao_cdc_${db.name.slice(-8)}_${++slotNumber}`;
});
afterEach(async () => {
  while (running.length) await running.pop()!.stop();
  await dropSlots(db.pool, db.name);
});

function cdc(
  options: Partial<CdcDispatcherOptions> & { publisher: CdcDispatcherOptions['publisher'] },
) {
  const dispatcher = createCdcDispatcher({
    executor: fromPg(db.pool),
    replicationConnection: { connectionString: db.url },
    slotName: slot,
    sweepIntervalMs: 600_000, // the sweeper claims once at start, then stays out of the way
    confirmIntervalMs: 100,
    backoff: { baseMs: 200, maxMs: 200, jitterMs: 0 },
    ...options,
  });
  running.push(dispatcher);
  return dispatcher;
}

/**
 * Starts it and waits for the sweeper's first claim (its catch-up at start): until then the
 * sweeper may still pick up rows the test commits, and tests that assert "published from the WAL,
 * not by the sweeper" would race it.
 */
async function startAfterSweep(dispatcher: CdcDispatcher): Promise<void> {
  let off = () => {};
  const swept = new Promise<void>((resolve) => {
    off = dispatcher.on('dispatcher:claim:success', () => resolve());
  });
  await dispatcher.start();
  await swept;
  off();
}

/** The CDC dispatcher's "what falls due next?" statement (sql/cdc.ts nextDueSql). */
const isNextDue = (text: string) =>
  text.trimStart().startsWith('SELECT extract(epoch FROM o.available_at - now())');

/** `inner`, with the statements `match` picks run `delayMs` late. */
function slowed(inner: SqlExecutor, match: (text: string) => boolean, delayMs: number) {
  const executor: SqlExecutor = {
    query: async (text, values) => {
      if (match(text)) await new Promise((resolve) => setTimeout(resolve, delayMs));
      return inner.query(text, values);
    },
  };
  return executor;
}

describe('CDC dispatcher (logical replication, pgoutput)', () => {
  it('runs on a server with wal_level=logical (a private one when the shared one has less)', () => {
    expect(walLevel).toBe('logical');
  });

  it('publishes from the WAL every message once, in per-aggregate order, and confirms the slot past them', async () => {
    const publisher = new InMemoryPublisher();
    const dispatcher = cdc({ publisher });
    await startAfterSweep(dispatcher);
    const written = [];
    // Many small transactions, several of them concurrent and on the same aggregates.
    for (let round = 0; round < 10; round++) {
      const batches = await Promise.all(
        [0, 1, 2].map((k) =>
          enqueueCommitted(
            db.pool,
            manyMessages(5, 2).map((m) => ({ ...m, payload: { round, k } })),
          ),
        ),
      );
      written.push(...batches.flat());
    }
    await expect.poll(() => publisher.published.length, { timeout: 30_000 }).toBe(300);
    const report = checkHistory(expectedOf(written), eventsInOrder(publisher.published));
    expect(report).toMatchObject({ lost: [], orderViolations: [], duplicates: 0 });
    // The WAL-driven worker published them, not the sweeper. (Counted when settled: the last
    // settle may still be running when the publisher has seen the last message.)
    await expect.poll(() => dispatcher.stats().cdc.published, { timeout: 10_000 }).toBe(300);
    expect(dispatcher.stats().sweeper.published).toBe(0);
    expect(dispatcher.totals().published).toBe(300);
    const { rows } = await db.pool.query<{ lsn: string }>(
      `SELECT pg_current_wal_lsn()::text AS lsn`,
    );
    await expect
      .poll(
        async () => parseLsn((await slotState(db.pool, slot))!.confirmed) >= parseLsn(rows[0]!.lsn),
        { timeout: 30_000 },
      )
      .toBe(true);
  });

  it('never confirms a position before the rows committed up to it are published', async () => {
    let open: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const inner = new InMemoryPublisher();
    let calls = 0;
    const publisher = {
      publish: async (messages: readonly OutgoingMessage[]) => {
        calls++;
        await gate;
        return inner.publish(messages);
      },
    };
    const dispatcher = cdc({ publisher });
    const received: { lsn: string; rowIds: string[] }[] = [];
    dispatcher.on('cdc:transaction:receive', (t) => received.push(t));
    const confirms: string[] = [];
    dispatcher.on('cdc:lsn:confirm', ({ lsn }) => confirms.push(lsn));
    await dispatcher.start();
    const [message] = await enqueueCommitted(db.pool, manyMessages(1, 1));
    await expect.poll(() => calls, { timeout: 30_000 }).toBe(1);
    const commit = received.find((t) => t.rowIds.length === 1)!;
    expect(commit).toBeDefined();
    // The commit was received and handed to the publisher, which has not answered.
    expect(parseLsn(dispatcher.confirmedLsn)).toBeLessThan(parseLsn(commit.lsn));
    expect(confirms.every((lsn) => parseLsn(lsn) < parseLsn(commit.lsn))).toBe(true);
    open();
    await expect
      .poll(() => inner.published.map((m) => m.id), { timeout: 30_000 })
      .toEqual([message!.messageId]);
    await expect
      .poll(() => parseLsn(dispatcher.confirmedLsn) >= parseLsn(commit.lsn), { timeout: 30_000 })
      .toBe(true);
    await expect
      .poll(
        async () => parseLsn((await slotState(db.pool, slot))!.confirmed) >= parseLsn(commit.lsn),
        { timeout: 30_000 },
      )
      .toBe(true);
  });

  it('retries and dead-letters like the polling dispatcher; a failing head blocks only its aggregate', async () => {
    let failures = 0;
    const publisher = new InMemoryPublisher({
      inject: (m) => {
        if (m.aggregateId === 'flaky' && m.sequence === 1 && failures++ < 1)
          return { status: 'retryable', error: 'broker hiccup' };
        if (m.aggregateId === 'poison') return { status: 'permanent', error: 'rejected' };
        return undefined;
      },
    });
    const dispatcher = cdc({ publisher });
    await startAfterSweep(dispatcher);
    await enqueueCommitted(db.pool, [
      { topic: 'payment.charge', aggregateId: 'flaky', payload: { n: 1 } },
      { topic: 'payment.charge', aggregateId: 'flaky', payload: { n: 2 } },
      { topic: 'payment.charge', aggregateId: 'poison', payload: {} },
      { topic: 'payment.charge', aggregateId: 'fine', payload: {} },
    ]);
    await expect.poll(() => publisher.published.length, { timeout: 30_000 }).toBe(3);
    expect(publisher.published.map((m) => `${m.aggregateId}:${m.sequence}`)).toEqual([
      'fine:1',
      'flaky:1',
      'flaky:2',
    ]);
    const { rows } = await db.pool.query(
      `SELECT aggregate_id, attempts, dead_lettered_at IS NOT NULL AS dead, last_error FROM outbox_messages ORDER BY aggregate_id, sequence`,
    );
    expect(rows).toEqual([
      { aggregate_id: 'fine', attempts: 1, dead: false, last_error: null },
      { aggregate_id: 'flaky', attempts: 2, dead: false, last_error: 'broker hiccup' },
      { aggregate_id: 'flaky', attempts: 1, dead: false, last_error: null },
      { aggregate_id: 'poison', attempts: 1, dead: true, last_error: 'permanent: rejected' },
    ]);
    // All by the WAL-driven worker (its own retry timer), none by the sweeper.
    expect(dispatcher.stats().sweeper.published).toBe(0);
    await expect.poll(() => dispatcher.stats().cdc.deadLettered, { timeout: 10_000 }).toBe(1);
  });

  // The due times of retries and deferred candidates must be known when they are set: a look
  // afterwards ("what falls due next?") can come after the backoff ran out and find nothing. The
  // look is slowed here well past the backoff, which a loaded machine does now and then.
  it('a retry is claimed again at its backoff even when every later look at due times comes after it', async () => {
    let failures = 0;
    const publisher = new InMemoryPublisher({
      inject: (m) =>
        m.aggregateId === 'flaky' && failures++ < 1
          ? { status: 'retryable', error: 'broker hiccup' }
          : undefined,
    });
    const dispatcher = cdc({ publisher, executor: slowed(fromPg(db.pool), isNextDue, 600) });
    await startAfterSweep(dispatcher);
    await enqueueCommitted(db.pool, [
      { topic: 'payment.charge', aggregateId: 'flaky', payload: { n: 1 } },
      { topic: 'payment.charge', aggregateId: 'flaky', payload: { n: 2 } },
    ]);
    await expect.poll(() => publisher.published.length, { timeout: 30_000 }).toBe(2);
    expect(dispatcher.stats().sweeper.published).toBe(0);
  });

  it('a candidate deferred behind a head backing off (another dispatcher retried it) is claimed when the head is due', async () => {
    const [head] = await enqueueCommitted(db.pool, [
      { topic: 'payment.charge', aggregateId: 'A', payload: 1 },
    ]);
    // Not due at the sweeper's first claim: as if another dispatcher had retried it.
    await db.pool.query(`UPDATE outbox SET available_at = now() + interval '1 hour'`);
    const publisher = new InMemoryPublisher();
    const dispatcher = cdc({ publisher, executor: slowed(fromPg(db.pool), isNextDue, 600) });
    await startAfterSweep(dispatcher);
    await db.pool.query(`UPDATE outbox SET available_at = now() + interval '300 ms'`);
    const [behind] = await enqueueCommitted(db.pool, [
      { topic: 'payment.charge', aggregateId: 'A', payload: 2 },
    ]);
    await expect
      .poll(() => publisher.published.map((m) => m.id), { timeout: 30_000 })
      .toEqual([head!.messageId, behind!.messageId]);
    expect(dispatcher.stats().sweeper.published).toBe(0);
  });

  it('a wake-up that comes before the server considers the retry due looks again instead of leaving it to the sweeper', async () => {
    let failures = 0;
    const publisher = new InMemoryPublisher({
      inject: () => (failures++ < 1 ? { status: 'retryable', error: 'broker hiccup' } : undefined),
    });
    // After the retry's settle, its due time moves 300 ms later than the settle reported: the
    // wake-up at the backoff finds nothing due (a timer firing a moment early). The look at
    // "what falls due next?" is slowed past those 300 ms (a loaded machine): run after the
    // claim, it came when the row was due — neither claimed nor ahead — and left it to the
    // sweeper. The first look fails outright: the claim must still run, the look come again.
    const pool = fromPg(db.pool);
    let looks = 0;
    const moved: SqlExecutor = {
      query: async (text, values) => {
        const result = await pool.query(text, values);
        if (text.includes('jsonb_to_recordset'))
          await pool.query(`UPDATE outbox SET available_at = available_at + interval '300 ms'`);
        return result as never;
      },
    };
    const slow = slowed(moved, isNextDue, 600);
    const executor: SqlExecutor = {
      query: (text, values, options) =>
        isNextDue(text) && looks++ === 0
          ? Promise.reject(new Error('connection timeout'))
          : slow.query(text, values, options),
    };
    const dispatcher = cdc({ publisher, executor });
    await startAfterSweep(dispatcher);
    await enqueueCommitted(db.pool, [{ topic: 'payment.charge', aggregateId: 'A', payload: 1 }]);
    await expect.poll(() => publisher.published.length, { timeout: 30_000 }).toBe(1);
    expect(failures).toBe(2);
    expect(dispatcher.stats().sweeper.published).toBe(0);
  });

  it('a message behind a head awaiting approval is deferred: its position is confirmed, and no cycle fails on the held head', async () => {
    const publisher = new InMemoryPublisher();
    const dispatcher = cdc({ publisher });
    const failures: Error[] = [];
    dispatcher.on('cdc:cycle:failure', ({ error }) => failures.push(error));
    await startAfterSweep(dispatcher);
    await enqueueCommitted(db.pool, [
      { topic: 'payment.refund', aggregateId: 'held', payload: 1, requiresApproval: true },
      { topic: 'payment.refund', aggregateId: 'held', payload: 2 },
    ]);
    const { rows } = await db.pool.query<{ lsn: string }>(
      `SELECT pg_current_wal_lsn()::text AS lsn`,
    );
    // Nothing is published; both rows are recorded in the table, so the slot moves past them.
    await expect
      .poll(() => parseLsn(dispatcher.confirmedLsn) >= parseLsn(rows[0]!.lsn), {
        timeout: 30_000,
      })
      .toBe(true);
    expect(publisher.published).toEqual([]);
    expect(failures).toEqual([]);
  });

  it('reuses its slot across restarts, resumes where it confirmed, and reports slot lag', async () => {
    const first = cdc({ publisher: new InMemoryPublisher(), lagIntervalMs: 50 });
    const created: string[] = [];
    first.on('cdc:slot:create', ({ slot: name }) => created.push(name));
    const lags: number[] = [];
    first.on('cdc:slot:lag', ({ lagBytes }) => lags.push(lagBytes));
    await first.start();
    expect(created).toEqual([slot]);
    await expect.poll(() => lags.length, { timeout: 30_000 }).toBeGreaterThan(0);
    expect(lags.every((lag) => Number.isFinite(lag) && lag >= 0)).toBe(true);
    await first.stop();
    running.length = 0;

    // Written while no CDC dispatcher runs: the slot retains it, and the lag grows.
    const lagBefore = (await readSlotLag(fromPg(db.pool), slot))!;
    const written = await enqueueCommitted(db.pool, manyMessages(3, 3));
    expect((await readSlotLag(fromPg(db.pool), slot))!).toBeGreaterThan(lagBefore);
    expect(await readSlotLag(fromPg(db.pool), 'no_such_slot')).toBeNull();

    const publisher = new InMemoryPublisher();
    const second = cdc({ publisher, sweepIntervalMs: 600_000 });
    second.on('cdc:slot:create', ({ slot: name }) => created.push(name));
    await second.start();
    await expect.poll(() => publisher.published.length, { timeout: 30_000 }).toBe(9);
    expect(created).toEqual([slot]); // not recreated
    const report = checkHistory(expectedOf(written), eventsInOrder(publisher.published));
    expect(report).toMatchObject({ lost: [], orderViolations: [], duplicates: 0 });
    const slots = await db.pool.query(
      `SELECT count(*)::int AS n FROM pg_replication_slots WHERE slot_name = $1`,
      [slot],
    );
    expect(slots.rows[0].n).toBe(1);
    expect(await second.slotLagBytes()).toEqual(expect.any(Number));
  });

  it('a slot that is gone (a failover to a standby without it) is recreated, and the sweeper publishes what the stream never saw', async () => {
    const publisher = new InMemoryPublisher();
    // Slow to reconnect, so the slot can be dropped before the stream comes back for it.
    const dispatcher = cdc({
      publisher,
      id: 'gone',
      reconnectDelay: { minMs: 2_000, maxMs: 2_000 },
    });
    let sweeps = 0;
    dispatcher.on('dispatcher:claim:success', ({ owner }) => {
      if (owner.startsWith('gone-sweeper')) sweeps++;
    });
    const created: string[] = [];
    dispatcher.on('cdc:slot:create', ({ lsn }) => created.push(lsn));
    const lost: string[] = [];
    dispatcher.on('cdc:stream:lost', ({ error }) => lost.push(error.message));
    await startAfterSweep(dispatcher);
    const written = await enqueueCommitted(db.pool, manyMessages(2, 2));
    await expect.poll(() => publisher.published.length, { timeout: 30_000 }).toBe(4);
    // What a failover on PostgreSQL 15/16 leaves: the new primary has no such slot.
    await dropSlots(db.pool, db.name);
    // Committed while no slot exists: no stream will ever carry these.
    written.push(...(await enqueueCommitted(db.pool, manyMessages(2, 2, 'mail.send'))));
    await expect.poll(() => created.length, { timeout: 30_000 }).toBe(2);
    expect(lost.some((m) => /was gone .*recreated/.test(m))).toBe(true);
    // The sweeper claims again at once, not after its 600 s: it publishes them — unless the
    // worker's drain, still going when the slot was dropped, claimed them first (its claim takes
    // whatever is due), which a loaded machine does now and then.
    await expect.poll(() => sweeps, { timeout: 30_000 }).toBeGreaterThanOrEqual(2);
    await expect.poll(() => publisher.published.length, { timeout: 30_000 }).toBe(8);
    // Streaming goes on from the new slot.
    written.push(...(await enqueueCommitted(db.pool, manyMessages(2, 2, 'sms.send'))));
    await expect.poll(() => publisher.published.length, { timeout: 30_000 }).toBe(12);
    await expect
      .poll(() => dispatcher.stats().cdc.published + dispatcher.stats().sweeper.published, {
        timeout: 10_000,
      })
      .toBe(12);
    const report = checkHistory(expectedOf(written), eventsInOrder(publisher.published));
    expect(report).toMatchObject({ lost: [], orderViolations: [], duplicates: 0 });
  });

  it('the sweeper publishes rows the stream never sees (committed before the slot existed)', async () => {
    const [before] = await enqueueCommitted(db.pool, manyMessages(1, 1));
    const publisher = new InMemoryPublisher();
    const dispatcher = cdc({ publisher });
    await dispatcher.start();
    await expect
      .poll(() => publisher.published.map((m) => m.id), { timeout: 30_000 })
      .toEqual([before!.messageId]);
    await expect.poll(() => dispatcher.stats().sweeper.published, { timeout: 10_000 }).toBe(1);
    expect(dispatcher.stats().cdc.published).toBe(0);
  });
});
