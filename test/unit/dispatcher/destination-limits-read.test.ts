import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DestinationLimits } from '../../../src/dispatcher/destination-limits.js';
import type { OutgoingMessage } from '../../../src/publishers/publisher.js';
import type { SqlExecutor } from '../../../src/store/sql-executor.js';

/**
 * How the route gate reads the paused routes (issue 43): a read older than 100 ms is used while a
 * new one runs in the background, not waited for between a claim and its publish; past a second,
 * or after this dispatcher's own pause, the gate waits for a read. The clock is faked (Date only);
 * reads are promises the test resolves.
 */

const message: OutgoingMessage = {
  id: 'm1',
  rowId: '1',
  topic: 'payment.charge',
  aggregateId: 'a',
  sequence: 1,
  payload: {},
  headers: {},
  createdAt: new Date(0),
  attempts: 1,
};

const pauseRow = { kind: 'pause', route: '*', reason: 'down', untilMs: 5_000, probeMs: 1_000 };

function fakeDatabase() {
  const reads: { resolve: (rows: unknown[]) => void }[] = [];
  const executor: SqlExecutor = {
    query: async <Row>(text: string) => {
      if (text.includes("'pause' AS kind"))
        return new Promise<{ rows: Row[] }>((resolve) =>
          reads.push({ resolve: (rows) => resolve({ rows: rows as Row[] }) }),
        );
      // The pause this dispatcher writes after failures (sql/route-pauses.ts pauseRouteSql).
      return { rows: [{ untilMs: 1_000 }] as Row[] };
    },
  };
  return { executor, reads };
}

/** Lets pending promise callbacks run (the gate's awaits), without any timer. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

/** The gate's promise and whether it has resolved yet. */
function watch<T>(promise: Promise<T>) {
  const state = { done: false, promise };
  void promise.then(() => (state.done = true));
  return state;
}

describe('DestinationLimits: reading paused routes', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(1_000_000);
  });
  afterEach(() => vi.useRealTimers());

  const limits = (executor: SqlExecutor) =>
    new DestinationLimits({
      executor,
      schema: 'public',
      routeOf: () => '*',
      pause: { afterFailures: 1 },
      leaseMs: 30_000,
    });

  it('waits for the first read, then serves a stale one while the next runs', async () => {
    const { executor, reads } = fakeDatabase();
    const gate = limits(executor);
    const first = watch(gate.gate('o#1', [message]));
    await settle();
    expect(first.done).toBe(false);
    reads[0]!.resolve([]);
    expect((await first.promise).send).toEqual([message]);

    vi.setSystemTime(1_000_150); // stale: older than 100 ms
    const second = await gate.gate('o#2', [message]);
    expect(reads).toHaveLength(2); // a read was started...
    expect(second.send).toEqual([message]); // ...and the gate did not wait for it

    reads[1]!.resolve([pauseRow]); // the background read sees another dispatcher's pause
    await settle();
    const third = await gate.gate('o#3', [message]);
    expect(third.send).toEqual([]);
    expect(third.held[0]).toMatchObject({ kind: 'defer', delayMs: 5_000 });
    expect(reads).toHaveLength(2);
  });

  it('waits for a read once the last one is older than a second', async () => {
    const { executor, reads } = fakeDatabase();
    const gate = limits(executor);
    const first = gate.gate('o#1', [message]);
    await settle();
    reads[0]!.resolve([]);
    await first;

    vi.setSystemTime(1_002_000);
    const late = watch(gate.gate('o#2', [message]));
    await settle();
    expect(reads).toHaveLength(2);
    expect(late.done).toBe(false);
    reads[1]!.resolve([pauseRow]);
    expect((await late.promise).send).toEqual([]);
  });

  it('does not keep a read that started before its own pause', async () => {
    const { executor, reads } = fakeDatabase();
    const gate = limits(executor);
    const first = gate.gate('o#1', [message]);
    await settle();
    reads[0]!.resolve([]);
    await first;

    vi.setSystemTime(1_000_150);
    await gate.gate('o#2', [message]); // starts a background read (reads[1])
    // The publish failed: this dispatcher pauses the route (afterFailures 1).
    const plan = [{ rowId: '1', kind: 'retry' as const, error: 'HTTP 503', delayMs: 100 }];
    const review = await gate.review(
      'o#2',
      [message],
      [{ kind: 'outcome', outcome: { status: 'retryable', error: 'HTTP 503' } }],
      plan,
      new Map(),
    );
    expect(review.paused.map((p) => p.route)).toEqual(['*']);
    reads[1]!.resolve([]); // read before the pause: says nothing is paused
    await settle();

    const next = watch(gate.gate('o#3', [message]));
    await settle();
    expect(reads).toHaveLength(3); // the older read was not kept: a new one is waited for
    expect(next.done).toBe(false);
    reads[2]!.resolve([pauseRow]);
    expect((await next.promise).send).toEqual([]);
  });
});
