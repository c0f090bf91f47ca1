import { OutboxValidationError } from '../core/errors.js';
import { HEADER, type OutboxMessage } from '../core/message.js';
import { resolveLimits, validateMessages, type ValidationLimits } from '../core/validate.js';
import type { D1Db, D1Statement } from './d1-types.js';
import { bumpSequenceSql, insertMessageSql } from './enqueue-sql.js';

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
  const limits: ValidationLimits = resolveLimits({
    maxPayloadBytes: options.maxPayloadBytes,
    maxHeadersBytes: options.maxHeadersBytes,
  });
  for (const [key, value] of Object.entries(options.headers ?? {})) {
    if (typeof value !== 'string')
      throw new OutboxValidationError(`options.headers.${key}`, 'must be a string');
  }
  const valid = validateMessages(messages, limits);
  valid.forEach((message, index) => {
    if (message.shadow)
      throw new OutboxValidationError(
        `messages[${index}].shadow`,
        'shadow mode is not supported by the D1 outbox; write the message live or not at all',
      );
    // Held messages wait in Postgres for `outbox approve`; D1 has no approval flow, and writing
    // the message anyway would send an effect nobody approved.
    if (message.approval)
      throw new OutboxValidationError(
        `messages[${index}].requiresApproval`,
        'approval holds are not supported by the D1 outbox; the message would be sent unapproved',
      );
    // Ignoring the key would send the effect twice, which is what the caller wrote it to prevent.
    if (message.dedupeKey !== undefined)
      throw new OutboxValidationError(
        `messages[${index}].dedupeKey`,
        'dedupe keys are not supported by the D1 outbox; deduplicate in the consumer (by message id) instead',
      );
  });
  const now = (options.now ?? Date.now)();
  const statements: D1Statement[] = [];
  const messageIds: string[] = [];
  valid.forEach((message, index) => {
    const original = messages[index] as OutboxMessage;
    // Caller-provided headers win over defaults: an explicit traceparent is a decision.
    const headers: Record<string, string> = {
      ...options.headers,
      [HEADER.schemaVersion]: String(original.schemaVersion ?? options.defaultSchemaVersion ?? '1'),
      ...(original.tenantId !== undefined ? { [HEADER.tenantId]: original.tenantId } : {}),
      ...message.headers,
    };
    const availableAt = message.availableAt?.getTime() ?? now + message.delayMs;
    const messageId = crypto.randomUUID();
    messageIds.push(messageId);
    statements.push(
      db.prepare(bumpSequenceSql).bind(message.aggregateId),
      db
        .prepare(insertMessageSql)
        .bind(
          messageId,
          message.aggregateId,
          message.topic,
          message.payloadJson,
          JSON.stringify(headers),
          now,
          Math.round(availableAt),
          message.ordered === undefined ? null : message.ordered ? 1 : 0,
        ),
    );
  });
  return Object.assign(statements, { messageIds });
}
