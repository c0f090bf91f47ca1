import { OutboxValidationError } from './errors.js';
import { HEADER, type OutboxMessage } from './message.js';
import { resolveLimits, validateMessages, type ValidationLimits } from './validate.js';

/**
 * Options shared by the writers that insert a message as plain column values (ms-epoch times,
 * JSON text): D1's `enqueue`, the SQLite store's `createSqliteOutbox`, the MySQL store's
 * `createMysqlOutbox`.
 */
export interface MessageRowOptions {
  /** Largest serialised payload accepted, in bytes. Default 1 MiB. */
  maxPayloadBytes?: number;
  /** Largest serialised headers object accepted, in bytes. Default 64 KiB. */
  maxHeadersBytes?: number;
  /** `schema_version` header written when a message gives none. Default `"1"`. */
  defaultSchemaVersion?: string;
  /** Headers added to every message, under the message's own (which win). */
  headers?: Record<string, string>;
}

/**
 * One message as insert parameters, in the order of `insertMessageSql` (src/sql/sqlite/enqueue.ts;
 * the MySQL writer, src/stores/mysql/mysql-writer.ts, takes the same tuple):
 * message id, aggregate id, topic, payload JSON, headers JSON, created_at ms, available_at ms,
 * ordered (1, 0 or null: decided by `outbox_unordered_topics`).
 */
export type MessageRow = [
  messageId: string,
  aggregateId: string,
  topic: string,
  payload: string,
  headers: string,
  createdAt: number,
  availableAt: number,
  ordered: 0 | 1 | null,
];

/**
 * Validates messages with the Postgres writer's rules and errors and turns them into insert
 * parameters, in input order. `store` names the store in the errors for what these stores cannot
 * do:
 * shadow messages, approval holds and dedupe keys are refused rather than ignored (ignoring a
 * hold would send an effect nobody approved; ignoring a key would send it twice). Pure: runs in
 * Workers and in Node alike.
 */
export function messageRows(
  messages: readonly OutboxMessage[],
  options: MessageRowOptions,
  now: number,
  store: string,
): MessageRow[] {
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
        `shadow mode is not supported by the ${store}; write the message live or not at all`,
      );
    if (message.approval)
      throw new OutboxValidationError(
        `messages[${index}].requiresApproval`,
        `approval holds are not supported by the ${store}; the message would be sent unapproved`,
      );
    if (message.dedupeKey !== undefined)
      throw new OutboxValidationError(
        `messages[${index}].dedupeKey`,
        `dedupe keys are not supported by the ${store}; deduplicate in the consumer (by message id) instead`,
      );
  });
  return valid.map((message, index) => {
    const original = messages[index] as OutboxMessage;
    // Caller-provided headers win over defaults: an explicit traceparent is a decision.
    const headers: Record<string, string> = {
      ...options.headers,
      [HEADER.schemaVersion]: String(original.schemaVersion ?? options.defaultSchemaVersion ?? '1'),
      ...(original.tenantId !== undefined ? { [HEADER.tenantId]: original.tenantId } : {}),
      ...message.headers,
    };
    const availableAt = message.availableAt?.getTime() ?? now + message.delayMs;
    return [
      crypto.randomUUID(),
      message.aggregateId,
      message.topic,
      message.payloadJson,
      JSON.stringify(headers),
      now,
      Math.round(availableAt),
      message.ordered === undefined ? null : message.ordered ? 1 : 0,
    ];
  });
}
