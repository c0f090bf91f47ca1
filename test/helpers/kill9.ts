import { afterAll, beforeAll, expect } from 'vitest';
import type { CliProcess } from './cli-process.js';
import { createTestDatabase, type TestDatabase } from './database.js';
import { startWebhookReceiver, type WebhookReceiver } from './webhook-receiver.js';

/**
 * What the kill -9 tests (test/chaos/*-kill9*.test.ts) share: a database of the file's own and a
 * webhook receiver that holds each delivery `slowMs` until `fast()` (so the victim dies with
 * requests and leases in flight, and the survivor is not held up), made in beforeAll and dropped
 * in afterAll; `current()` gives both once beforeAll ran.
 *
 * `database` makes the database (default {@link createTestDatabase}); `beforeDrop` runs before
 * it is dropped (a CDC test's slots), and the drop runs whatever happened before it.
 */
export function useSlowReceiver(options: {
  slowMs: number;
  database?: () => Promise<TestDatabase>;
  beforeDrop?: (db: TestDatabase) => Promise<unknown>;
}): { current(): { db: TestDatabase; receiver: WebhookReceiver }; fast(): void } {
  let db: TestDatabase | undefined;
  let receiver: WebhookReceiver | undefined;
  let slow = true;
  beforeAll(async () => {
    db = await (options.database ?? createTestDatabase)();
    receiver = await startWebhookReceiver({ holdMs: () => (slow ? options.slowMs : 0) });
  });
  afterAll(async () => {
    try {
      await receiver?.close();
      if (db) await options.beforeDrop?.(db);
    } finally {
      await db?.drop();
    }
  });
  return {
    current: () => {
      if (!db || !receiver) throw new Error('the database and the receiver are made in beforeAll');
      return { db, receiver };
    },
    fast: () => {
      slow = false;
    },
  };
}

/** kill -9 of `victim`: resolves once it has died of it. */
export async function killNine(victim: Pick<CliProcess, 'child' | 'exited'>): Promise<void> {
  victim.child.kill('SIGKILL');
  expect(await victim.exited).toBe('SIGKILL');
}
