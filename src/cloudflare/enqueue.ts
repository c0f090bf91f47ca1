import { OutboxValidationError } from '../core/errors.js';
import type { OutboxMessage } from '../core/message.js';
import { messageRows } from '../core/message-rows.js';
import type { D1Db, D1Statement } from './d1-types.js';
import { bumpSequenceSql, insertMessageSql } from '../sql/sqlite/enqueue.js';

/** Options of {@link enqueue}. */
export interface D1EnqueueOptions {
  /** Largest serialised payload accepted, in bytes. Default 1 MiB; see the note on Queues below. */
  maxPayloadBytes?: number;
  /** Largest serialised headers object accepted, in bytes. Default 64 KiB. */
  maxHeadersBytes?: number;
  /** `schema_version` header written when a message gives none. Default `"1"`. */
  defaultSchemaVersion?: string;
  /**
   * Headers added to every message, under the message's own (which win). Put the request's
   * `traceparent` here (see `traceHeaders`) to carry the trace to the consumer.
   */
  headers?: Record<string, string>;
  /** Clock for `created_at` / `available_at`, in ms since the epoch. Default `Date.now`. */
  now?: () => number;
}

/**
 * The outbox statements for the caller's batch, and the message ids they will write (in input
 * order) — known before the batch runs because ids are generated here.
 */
export interface EnqueueStatements extends Array<D1Statement> {
  readonly messageIds: readonly string[];
}

/**
 * Validates messages (same shape and errors as the Postgres writer) and returns the D1 statements
 * that write them. Nothing is written here: put the statements in the SAME `db.batch([...])` as
 * your business rows, so both commit together or neither does (D1 runs a batch as one
 * transaction). Invalid input throws `OutboxValidationError` before any statement exists; an
 * empty array returns no statements.
 *
 * Note: a Cloudflare Queues message is at most 128 KB, so payloads bigger than about 120 KB are
 * accepted here but dead-lettered by the dispatcher; lower `maxPayloadBytes` to reject them at
 * write time instead.
 *
 * @example
 * ```ts
 * const outbox = enqueue(env.DB, {
 *   topic: 'payment.charge',
 *   aggregateId: `order:${orderId}`,
 *   payload: { orderId, amount: 1200 },
 * }, { headers: traceHeaders(request) });
 * await env.DB.batch([insertOrder, ...outbox]);
 * ```
 */
export function enqueue(
  db: D1Db,
  input: OutboxMessage | readonly OutboxMessage[],
  options: D1EnqueueOptions = {},
): EnqueueStatements {
  if (typeof db?.prepare !== 'function')
    throw new OutboxValidationError('db', 'must be a D1 database binding (env.DB)');
  const messages: readonly OutboxMessage[] = Array.isArray(input)
    ? input
    : [input as OutboxMessage];
  const rows = messageRows(messages, options, (options.now ?? Date.now)(), 'D1 outbox');
  const statements: D1Statement[] = [];
  for (const row of rows)
    statements.push(
      db.prepare(bumpSequenceSql).bind(row[1]),
      db.prepare(insertMessageSql).bind(...row),
    );
  const messageIds = rows.map((row) => row[0]);
  return Object.assign(statements, { messageIds });
}
