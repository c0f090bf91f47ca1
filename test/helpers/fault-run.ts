import type pg from 'pg';
import { afterAll } from 'vitest';
import type { EnqueuedMessage } from '../../src/index.js';
import type { CliProcess } from './cli-process.js';
import { enqueueCommitted, manyMessages } from './outbox-fixtures.js';

/**
 * What the broker fault tests (test/chaos/nats-cluster-node-loss, rabbitmq-blocked) share: a
 * stack of clean-ups run after the file, a wait that prints the dispatcher's log when it gives
 * up, and a writer committing messages all along.
 */
export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Clean-ups pushed during a test, run last-first after the file (errors ignored). */
export function cleanupStack(): (() => Promise<unknown>)[] {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterAll(async () => {
    while (cleanups.length) await cleanups.pop()!().catch(() => undefined);
  });
  return cleanups;
}

/**
 * Waits until `check()` holds. A guard against a hang, not a timing assertion: past `limitMs` it
 * throws, after writing the end of the dispatcher's log (which says what happened).
 */
export async function until(
  check: () => Promise<boolean> | boolean,
  what: string,
  dispatcher: CliProcess,
  limitMs = 60_000,
): Promise<void> {
  const started = Date.now();
  while (!(await check())) {
    if (Date.now() - started > limitMs) {
      process.stderr.write(`the dispatcher said:\n${dispatcher.output().slice(-6_000)}\n`);
      throw new Error(`still waiting for ${what} after ${limitMs / 1000} s`);
    }
    await sleep(50);
  }
}

/**
 * A writer: one transaction of 10 messages over 5 aggregates on `topic` every `everyMs`, until
 * `stop()`. `written` is everything it committed, in commit order.
 */
export function startWriter(
  pool: pg.Pool,
  topic: string,
  everyMs: number,
): { written: EnqueuedMessage[]; stop(): Promise<void> } {
  const written: EnqueuedMessage[] = [];
  let writing = true;
  const loop = (async () => {
    while (writing) {
      written.push(...(await enqueueCommitted(pool, manyMessages(5, 2, topic))));
      await sleep(everyMs);
    }
  })();
  return {
    written,
    stop: async () => {
      writing = false;
      await loop;
    },
  };
}
