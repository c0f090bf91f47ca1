import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parseLsn } from '../../../src/cdc/lsn.js';
import {
  createLaneCdcWakeSource,
  type LaneCdcWakeSource,
} from '../../../src/cdc/lane-cdc-wake-source.js';
import { OutboxValidationError } from '../../../src/core/errors.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import type { OutgoingMessage, Publisher } from '../../../src/publishers/publisher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import type { SqlExecutor } from '../../../src/store/sql-executor.js';
import { dropSlots, slotState } from '../../fixtures/latency/cdc-helpers.js';
import type { TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';
import { createLogicalTestDatabase } from '../../helpers/logical-database.js';
import { recordingExecutor, type RecordedCall } from '../../helpers/recording-executor.js';

/**
 * The lanes engine's CDC wake-ups (src/cdc/lane-cdc-wake-source.ts): the WAL names each committed
 * transaction's due lane messages to the dispatcher, which publishes them by id as it does for
 * the writer's NOTIFY; producers pay nothing (no waiter row, so no NOTIFY).
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createLogicalTestDatabase();
});
afterAll(async () => {
  try {
    if (db) await dropSlots(db.pool, db.name);
  } finally {
    await db?.drop();
  }
});

let slot = '';
let slotNumber = 0;
const stops: (() => Promise<void>)[] = [];
beforeEach(async () => {
  await db.pool.query(
    'TRUNCATE outbox_lane_messages, outbox_lane_parked; UPDATE outbox_lanes SET owner = NULL, lease_expires_at = NULL',
  );
  slot = `ao_lanes_cdc_${db.name.slice(-8)}_${++slotNumber}`;
});
afterEach(async () => {
  while (stops.length) await stops.pop()!();
  await dropSlots(db.pool, db.name);
});

function source(): LaneCdcWakeSource {
  return createLaneCdcWakeSource({
    executor: fromPg(db.pool),
    replicationConnection: { connectionString: db.url },
    slotName: slot,
    confirmIntervalMs: 100,
    streamTimeoutMs: 5_000,
    reconnectDelay: { minMs: 50, maxMs: 200 },
  });
}

/**
 * The lane reads among `statements` that no read by id that missed came before: a read by id
 * that does not find what the WAL named asks for a lane read (lane-dispatcher.ts
 * `#publishNamed`), and it can miss. The WAL decoder may send a commit before the committing
 * session has left the server's list of running transactions (PostgreSQL flushes the commit
 * record first), so a read by id at that moment does not see it yet; under CI's load that
 * happened. Any other lane read before the publish is one the hint should have saved.
 */
function unexplainedLaneReads(statements: readonly RecordedCall[]): string[] {
  const missedAt = statements.findIndex(
    (s) => isByIds(s.text) && s.rows !== undefined && s.rows < asked(s),
  );
  return statements
    .filter((s, i) => isLaneRead(s.text) && (missedAt < 0 || i < missedAt))
    .map((s) => s.text);
}

/**
 * Until `statements` has not grown for 300 ms: the stream's catch-up read (and the catch-up read
 * 100 ms after a publish by id) may still be running when the test goes on otherwise.
 */
async function settled(statements: readonly unknown[]): Promise<void> {
  let seen = -1;
  while (seen !== statements.length) {
    seen = statements.length;
    await new Promise((resolve) => setTimeout(resolve, 300));
  }
}

const isLaneRead = (s: string) => s.includes('outbox_lane_next(');
const isByIds = (s: string) => s.includes('outbox_lane_by_ids(');
/** How many ids a read by id asked for (its second argument). */
const asked = (call: RecordedCall) => (call.values![1] as unknown[]).length;

/** A dispatcher woken only by `wakeSource` (its poll is a minute), publishing into `published`. */
function dispatcher(wakeSource: LaneCdcWakeSource, executor: SqlExecutor = fromPg(db.pool)) {
  const published: OutgoingMessage[] = [];
  let onPublish: (messages: readonly OutgoingMessage[]) => void = () => undefined;
  const publisher: Publisher = {
    publish: async (messages) => {
      onPublish(messages);
      published.push(...messages);
      return messages.map(() => ({ status: 'published' as const }));
    },
  };
  // A long lease: the balance that renews it (every leaseMs / 3) is a lane read, and with the
  // default one (30 s) it fell between a commit and its publish when the stream took ~10 s to
  // start (slot creation waits for the cluster's running transactions: CI, other test files).
  const d = createLaneDispatcher({
    executor,
    publisher,
    pollIntervalMs: 60_000,
    leaseMs: 600_000,
    wakeSource,
  });
  d.start();
  stops.push(() => d.stop());
  return { d, published, onPublish: (f: typeof onPublish) => void (onPublish = f) };
}

async function streaming(wake: LaneCdcWakeSource, reconnect = false): Promise<void> {
  await new Promise<void>((resolve) =>
    wake.on('cdc:stream:start', (event) => {
      if (event.reconnect === reconnect) resolve();
    }),
  );
}

describe('lanes engine: CDC wake-ups', () => {
  it('publishes what a commit wrote by id, with no lane read between, and producers notify nobody', async () => {
    const wake = source();
    const started = streaming(wake);
    const { executor, calls: statements } = recordingExecutor(fromPg(db.pool));
    const { d, published, onPublish } = dispatcher(wake, executor);
    await started;
    await d.onIdle();
    await settled(statements);
    let from = statements.length;
    let before: RecordedCall[] | undefined;
    onPublish(() => void (before ??= statements.slice(from)));
    await enqueueLanes(db.pool, [{ topic: 'mail.send', aggregateId: 'cdc-1', payload: {} }]);
    await expect.poll(() => published.length, { timeout: 10_000 }).toBe(1);
    // Only the WAL can have woken it (a minute's poll, no NOTIFY), and it did not read its lanes.
    expect(unexplainedLaneReads(before!)).toEqual([]);
    expect(before!.some((s) => isByIds(s.text))).toBe(true);
    const first = before!;
    const waiters = await db.pool.query('SELECT 1 FROM outbox_waiters');
    expect(waiters.rowCount).toBe(0);
    // The publication it created streams what a wake-up reads, not the payload (PostgreSQL 15+).
    const columns = await db.pool.query<{ names: string }>(
      `SELECT string_agg(a, ',' ORDER BY a) AS names
       FROM pg_publication_tables, unnest(attnames) AS a WHERE pubname = 'agent_outbox_lanes_public'`,
    );
    expect(columns.rows[0]!.names).toBe('available_at,id,lane');

    // The aggregate's next message goes the same way (this dispatcher published the one before).
    await settled(statements);
    from = statements.length;
    before = undefined;
    await enqueueLanes(db.pool, [
      { topic: 'mail.send', aggregateId: 'cdc-1', payload: { n: 2 } },
      { topic: 'mail.send', aggregateId: 'cdc-2', payload: {} },
    ]);
    await expect.poll(() => published.length, { timeout: 10_000 }).toBe(3);
    expect(unexplainedLaneReads(before!)).toEqual([]);
    expect(before!.some((s) => isByIds(s.text))).toBe(true);
    // A miss is rare (the moment between the commit record and the commit's visibility): in one
    // of the two at least, the read by id found everything it was asked for.
    const found = (statements: RecordedCall[]) =>
      statements.some((s) => isByIds(s.text) && s.rows === asked(s));
    expect(found(first) || found(before!)).toBe(true);
    expect(published.map((m) => [m.aggregateId, m.sequence])).toEqual([
      ['cdc-1', 1],
      ['cdc-1', 2],
      ['cdc-2', 1],
    ]);
    // The slot is confirmed as the stream goes: it keeps no WAL back for what was named.
    await expect
      .poll(
        async () => {
          const state = await slotState(db.pool, slot);
          const { rows } = await db.pool.query<{ lsn: string }>(
            'SELECT pg_current_wal_lsn()::text AS lsn',
          );
          return parseLsn(rows[0]!.lsn) - parseLsn(state!.confirmed) < 64n * 1024n;
        },
        { timeout: 10_000 },
      )
      .toBe(true);
  });

  it('after a lost stream: restarts, catches up what was committed meanwhile, and names again', async () => {
    const wake = source();
    const started = streaming(wake);
    const { d, published } = dispatcher(wake);
    await started;
    await d.onIdle();
    const restarted = streaming(wake, true);
    await db.pool.query(
      `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1`,
      [slot],
    );
    await enqueueLanes(db.pool, [{ topic: 'mail.send', aggregateId: 'while-lost', payload: {} }]);
    await restarted;
    await expect.poll(() => published.length, { timeout: 10_000 }).toBe(1);
    await enqueueLanes(db.pool, [{ topic: 'mail.send', aggregateId: 'after', payload: {} }]);
    await expect.poll(() => published.length, { timeout: 10_000 }).toBe(2);
    expect(published.map((m) => m.aggregateId)).toEqual(['while-lost', 'after']);
  });

  it('starts at the end of WAL: what was written while it was stopped is not replayed, but read', async () => {
    // The slot exists and falls behind while no dispatcher streams it.
    const first = source();
    const firstStarted = streaming(first);
    const { d } = dispatcher(first);
    await firstStarted;
    await stops.pop()!();
    expect(d.state).toBe('stopped');
    const behind = (await slotState(db.pool, slot))!.confirmed;
    await enqueueLanes(
      db.pool,
      Array.from({ length: 200 }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: `stopped-${i}`,
        payload: { i },
      })),
    );
    const { rows } = await db.pool.query<{ lsn: string }>(
      'SELECT pg_current_wal_lsn()::text AS lsn',
    );
    const written = parseLsn(rows[0]!.lsn);
    expect(parseLsn(behind)).toBeLessThan(written);

    const second = source();
    const named: string[] = [];
    const secondStarted = streaming(second);
    const { published } = dispatcher({
      start: (wakeUp) =>
        second.start((hint) => {
          if (hint) named.push(hint);
          wakeUp(hint);
        }),
      stop: () => second.stop(),
      on: second.on.bind(second),
      get slot() {
        return second.slot;
      },
    });
    await secondStarted;
    // Moved past what was written while stopped before streaming: none of it named...
    expect(parseLsn((await slotState(db.pool, slot))!.confirmed)).toBeGreaterThanOrEqual(written);
    // ...and all of it published by the lane read the start's wake-up makes.
    await expect.poll(() => published.length, { timeout: 10_000 }).toBe(200);
    expect(named).toEqual([]);
  });

  it('refuses options it cannot use, before connecting', () => {
    const executor = fromPg(db.pool);
    const connection = { connectionString: db.url };
    expect(() =>
      createLaneCdcWakeSource({ executor: {} as never, replicationConnection: connection }),
    ).toThrow(OutboxValidationError);
    expect(() =>
      createLaneCdcWakeSource({ executor, replicationConnection: undefined as never }),
    ).toThrow(/replicationConnection/);
    expect(() =>
      createLaneCdcWakeSource({
        executor,
        replicationConnection: connection,
        slotName: 'Bad Slot!',
      }),
    ).toThrow(/slotName/);
    expect(() =>
      createLaneCdcWakeSource({
        executor,
        replicationConnection: connection,
        confirmIntervalMs: 5_000,
        streamTimeoutMs: 1_000,
      }),
    ).toThrow(/streamTimeoutMs/);
  });
});
