import { describe, expect, it } from 'vitest';
import { createCdcDispatcher, type CdcDispatcherOptions } from '../../../src/cdc/index.js';
import { InMemoryPublisher } from '../../../src/index.js';

describe('createCdcDispatcher options', () => {
  it('refuses asyncClaim: its stream claims wait for the WAL flush, and its sweeper must too', () => {
    const options = {
      executor: { query: async () => ({ rows: [] }) },
      publisher: new InMemoryPublisher(),
      replicationConnection: { connectionString: 'postgres://127.0.0.1:1/none' },
      asyncClaim: true,
    } as unknown as CdcDispatcherOptions;
    expect(() => createCdcDispatcher(options)).toThrow(/asyncClaim: is for the polling/);
    expect(() => createCdcDispatcher({ ...options, asyncClaim: undefined } as never)).not.toThrow();
  });
});
