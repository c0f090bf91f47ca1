import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import type { JsonValue } from '../core/message.js';
import { globToLike } from '../dispatcher/topic-patterns.js';
import { listAwaitingSql } from '../sql/approvals.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/** A message waiting for a decision, as `outbox approvals` lists it. */
export interface AwaitingApproval {
  /** Row id (bigint as a decimal string). */
  id: string;
  messageId: string;
  topic: string;
  aggregateId: string;
  sequence: number;
  /** Seconds since the message was written. */
  ageSeconds: number;
  createdAt: Date;
  /** When it expires undecided (treated as rejected). */
  expiresAt: Date;
  /** The time it was written to go out at (its delay); approval sends it then, or at once. */
  availableAt: Date | null;
  /** Who asked: the tool call (`tool <name> · idempotency key <key>`) or the writer's text. */
  requestedBy: string | null;
  /** Trace id of the request that wrote it (from its `traceparent` header). */
  traceId: string | null;
  tenantId: string | null;
  /** The payload as JSON, cut to 120 characters. */
  payloadSummary: string;
  payload: JsonValue;
}

/** The options of {@link listAwaitingApproval} and its lanes engine counterpart. */
export interface AwaitingOptions {
  schema?: string;
  topic?: string;
  limit?: number;
  tenantId?: string;
}

/**
 * Messages waiting for a decision, oldest first (`topic` is a glob, `payment.*`). With
 * `tenantId`, only that tenant's messages (their `tenant_id` header).
 */
export const listAwaitingApproval = awaitingReader(listAwaitingSql);

/**
 * A reader of held messages from `sql` (the claim engine's, or the lanes engine's from
 * sql/lane-approvals.ts): both statements return the same columns, in the same order.
 */
export function awaitingReader(sql: (schema: string) => string) {
  return async (
    executor: SqlExecutor,
    options: AwaitingOptions = {},
  ): Promise<AwaitingApproval[]> => {
    const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
    const { rows } = await executor.query<{
      id: string;
      messageId: string;
      topic: string;
      aggregateId: string;
      sequence: string;
      payload: JsonValue;
      traceparent: string | null;
      tenantId: string | null;
      requestedBy: string | null;
      createdAt: Date | string;
      expiresAt: Date | string;
      availableAt: Date | string | null;
      ageSeconds: number;
    }>(sql(schema), [
      options.topic ? globToLike(options.topic) : null,
      options.limit ?? 100,
      options.tenantId ?? null,
    ]);
    return rows.map((r) => {
      const json = JSON.stringify(r.payload) ?? 'null';
      return {
        id: String(r.id),
        messageId: r.messageId,
        topic: r.topic,
        aggregateId: r.aggregateId,
        sequence: Number(r.sequence),
        ageSeconds: Number(r.ageSeconds),
        createdAt: toDate(r.createdAt)!,
        expiresAt: toDate(r.expiresAt)!,
        availableAt: toDate(r.availableAt),
        requestedBy: r.requestedBy,
        traceId: /^[0-9a-f]{2}-([0-9a-f]{32})-/.exec(r.traceparent ?? '')?.[1] ?? null,
        tenantId: r.tenantId,
        payloadSummary: json.length > 120 ? `${json.slice(0, 119)}…` : json,
        payload: r.payload,
      };
    });
  };
}

function toDate(value: Date | string | null): Date | null {
  return value === null ? null : value instanceof Date ? value : new Date(value);
}
