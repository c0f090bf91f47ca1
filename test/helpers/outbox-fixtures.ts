import type pg from 'pg';
import {
  createDispatcher,
  createOutbox,
  fromPg,
  InMemoryPublisher,
  type Dispatcher,
  type DispatcherOptions,
  type EnqueuedMessage,
  type OutboxMessage,
  type Publisher,
} from '../../src/index.js';
import { batchTables, ringTables } from '../../src/sql/dispatched-log.js';
import { inTransaction } from './transaction.js';

/** Enqueues messages in one committed transaction on `pool`. */
export async function enqueueCommitted(
  pool: pg.Pool,
  messages: OutboxMessage[],
  schema?: string,
): Promise<EnqueuedMessage[]> {
  const outbox = createOutbox({ schema });
  return inTransaction(pool, (client) => outbox.enqueue(fromPg(client), messages));
}

/** `perAggregate` messages for each of `aggregates` aggregates, interleaved. */
export function manyMessages(
  aggregates: number,
  perAggregate: number,
  topic = 'payment.charge',
): OutboxMessage[] {
  const messages: OutboxMessage[] = [];
  for (let n = 0; n < perAggregate; n++) {
    for (let a = 0; a < aggregates; a++)
      messages.push({ topic, aggregateId: `agg-${a}`, payload: { a, n } });
  }
  return messages;
}

/** `inner`, but every publish takes `ms` longer: keeps a dispatcher busy for a known time. */
export function delayedPublisher(inner: Publisher, ms: number): Publisher {
  return {
    publish: async (messages, options) => {
      await new Promise((resolve) => setTimeout(resolve, ms));
      return inner.publish(messages, options);
    },
  };
}

/**
 * A dispatcher that claims one message per batch and takes `publishDelayMs` to publish each: busy
 * for a known time per message. `published` is the in-memory publisher behind the delay.
 */
export function slowDispatcher(
  pool: pg.Pool,
  publishDelayMs: number,
  options: Omit<DispatcherOptions, 'executor' | 'publisher'> = {},
): { dispatcher: Dispatcher; published: InMemoryPublisher } {
  const published = new InMemoryPublisher();
  const dispatcher = createDispatcher({
    executor: fromPg(pool),
    publisher: delayedPublisher(published, publishDelayMs),
    batchSize: 1,
    ...options,
  });
  return { dispatcher, published };
}

/**
 * Runs `statements` in one transaction with user triggers off (`session_replication_role =
 * replica`): bulk rows written the way the insert trigger would write them, without 100,000
 * trigger calls (a minute on a busy 2-core machine). The caller gives sequences and flags.
 */
export async function insertWithTriggersOff(
  pool: pg.Pool,
  statements: { text: string; values?: unknown[] }[],
): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`SET LOCAL session_replication_role = replica`);
    for (const s of statements) await client.query(s.text, s.values);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

/** Empties the outbox, its aggregate counters and the dispatched ring (migrations 018 and 021) — plus `also` tables — in one TRUNCATE. */
export async function resetOutbox(
  executor: { query(text: string): Promise<unknown> },
  options: { schema?: string; also?: string[] } = {},
): Promise<void> {
  const schema = options.schema ?? 'public';
  const also = (options.also ?? []).map((t) => (t.includes('.') ? t : `${schema}.${t}`));
  const tables = [
    `${schema}.outbox`,
    `${schema}.outbox_aggregates`,
    ...ringTables(schema),
    ...batchTables(schema),
    ...also,
  ];
  await executor.query(`TRUNCATE ${tables.join(', ')}`);
}
