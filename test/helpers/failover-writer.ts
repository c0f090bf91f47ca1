import type pg from 'pg';
import { createOutbox, fromPg, type EnqueuedMessage } from '../../src/index.js';
import { manyMessages } from './outbox-fixtures.js';

/** A message the writer saw committed, and the server port that committed it. */
export interface AcknowledgedMessage extends EnqueuedMessage {
  port: number;
}

/** The writer of the failover tests: what it wrote, and how to stop it. */
export interface FailoverWriter {
  /** COMMIT answered. */
  readonly acknowledged: AcknowledgedMessage[];
  /** COMMIT sent, no answer: committed or not, the new primary tells. */
  readonly inDoubt: EnqueuedMessage[];
  /** Transactions acknowledged so far. */
  transactions(): number;
  /** Stops after the transaction in flight. */
  stop(): Promise<void>;
}

/**
 * Writes one transaction of 10 messages (5 aggregates) at a time through `pool` until stopped,
 * 100 ms apart (slower than the dispatcher: it keeps up, so what is written is published at
 * once), going on through the failover's errors. Each acknowledged message notes the port of the
 * server that committed it (`inet_server_port()`), so a test can tell what the new primary wrote.
 * `outbox`: the writer (default the claim engine's; `createOutbox({ engine: 'lanes' })`).
 */
export function startFailoverWriter(
  pool: pg.Pool,
  outbox: Pick<ReturnType<typeof createOutbox>, 'enqueue'> = createOutbox(),
): FailoverWriter {
  // A checked-out client whose server goes away emits 'error': ours to swallow (the statement
  // in flight rejects anyway).
  pool.on('error', () => undefined);
  pool.on('connect', (client) => client.on('error', () => undefined));
  const acknowledged: AcknowledgedMessage[] = [];
  const inDoubt: EnqueuedMessage[] = [];
  let writing = true;
  let transactions = 0;
  const loop = (async () => {
    while (writing) {
      let client: pg.PoolClient | undefined;
      let enqueued: EnqueuedMessage[] = [];
      let committing = false;
      try {
        client = await pool.connect();
        await client.query('BEGIN');
        const { rows } = await client.query<{ port: number }>('SELECT inet_server_port() AS port');
        enqueued = await outbox.enqueue(fromPg(client), manyMessages(5, 2));
        committing = true;
        await client.query('COMMIT');
        acknowledged.push(...enqueued.map((m) => ({ ...m, port: rows[0]!.port })));
        transactions++;
        client.release();
        await new Promise((resolve) => setTimeout(resolve, 100));
      } catch {
        if (committing) inDoubt.push(...enqueued);
        client?.release(true);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
  })();
  return {
    acknowledged,
    inDoubt,
    transactions: () => transactions,
    stop: async () => {
      writing = false;
      await loop;
    },
  };
}
