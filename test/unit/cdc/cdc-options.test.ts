import { describe, expect, it } from 'vitest';
import { createCdcDispatcher, type CdcDispatcherOptions } from '../../../src/cdc/index.js';
import { InMemoryPublisher } from '../../../src/index.js';

describe('createCdcDispatcher options', () => {
  const options = {
    executor: { query: async () => ({ rows: [] }) },
    publisher: new InMemoryPublisher(),
    replicationConnection: { connectionString: 'postgres://127.0.0.1:1/none' },
  } as unknown as CdcDispatcherOptions;

  it('takes asyncClaim (its stream and sweeper claims commit alike: cdc-async-claim.test.ts)', () => {
    expect(() => createCdcDispatcher({ ...options, asyncClaim: true })).not.toThrow();
  });

  it('refuses a stream timeout that is not above the confirm interval', () => {
    expect(() =>
      createCdcDispatcher({ ...options, streamTimeoutMs: 500, confirmIntervalMs: 1_000 }),
    ).toThrow(/streamTimeoutMs/);
  });
});
