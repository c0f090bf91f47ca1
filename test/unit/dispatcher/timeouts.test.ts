import { describe, expect, it } from 'vitest';
import { createCdcDispatcher } from '../../../src/cdc/index.js';
import {
  createDispatcher,
  createListenNotifyWakeSource,
  InMemoryPublisher,
  OutboxValidationError,
  PgOutboxStore,
  type ListenClient,
  type SqlExecutor,
} from '../../../src/index.js';

/** Records the options each statement was given. */
function recordingExecutor(): SqlExecutor & { seen: unknown[] } {
  const seen: unknown[] = [];
  return {
    seen,
    query: async (_text, _values, options) => {
      seen.push(options);
      return { rows: [] };
    },
  };
}

describe('statement timeouts', () => {
  it('PgOutboxStore passes statementTimeoutMs with every claim, settle and release', async () => {
    const executor = recordingExecutor();
    const store = new PgOutboxStore(executor, { statementTimeoutMs: 1_234 });
    await store.claim({ owner: 'o#1', batchSize: 1, leaseMs: 1_000 });
    await store.settle(
      'o#1',
      [
        { rowId: '1', kind: 'published' },
        { rowId: '2', kind: 'retry', error: 'x', delayMs: 10 },
        { rowId: '3', kind: 'release' },
      ],
      { deadLettersBlock: true, leaseMs: 1_000 },
    );
    await store.release('o#1', ['4']);
    // expire sweep + claim + three settle statements + release
    expect(executor.seen).toHaveLength(6);
    expect(executor.seen.every((o) => (o as { timeoutMs: number }).timeoutMs === 1_234)).toBe(true);
  });

  it('none by default in PgOutboxStore; 10 s by default in a dispatcher; bad values refused', async () => {
    const bare = recordingExecutor();
    await new PgOutboxStore(bare).claim({ owner: 'o#1', batchSize: 1, leaseMs: 1_000 });
    expect(bare.seen.every((o) => o === undefined)).toBe(true);
    const executor = recordingExecutor();
    await createDispatcher({ executor, publisher: new InMemoryPublisher() }).drain();
    expect(executor.seen).toContainEqual({ timeoutMs: 10_000 });
    expect(() =>
      createDispatcher({
        executor: recordingExecutor(),
        publisher: new InMemoryPublisher(),
        statementTimeoutMs: -1,
      }),
    ).toThrow(OutboxValidationError);
    expect(() =>
      createCdcDispatcher({
        executor: recordingExecutor(),
        publisher: new InMemoryPublisher(),
        replicationConnection: {},
        confirmIntervalMs: 1_000,
        streamTimeoutMs: 1_000,
      }),
    ).toThrow(/streamTimeoutMs/);
  });

  it('the LISTEN wake source gives up on a connect that never answers, and tries again', async () => {
    let attempts = 0;
    const source = createListenNotifyWakeSource({
      connect: () => {
        attempts++;
        return new Promise<ListenClient>(() => undefined); // a connect into a partition
      },
      connectTimeoutMs: 50,
      reconnectDelay: { minMs: 10, maxMs: 10 },
    });
    const lost: Error[] = [];
    source.on('listen:connection:lost', ({ error }) => lost.push(error));
    await source.start(() => undefined);
    await expect.poll(() => attempts, { timeout: 5_000 }).toBeGreaterThanOrEqual(2);
    await source.stop();
    expect(lost[0]?.message).toMatch(/no answer within 50 ms/);
  });
});
