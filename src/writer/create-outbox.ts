import { context, SpanKind, trace, type Context } from '@opentelemetry/api';
import { engineOnce } from '../admin/database-engine.js';
import { OutboxAutocommitError, OutboxValidationError } from '../core/errors.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import { HEADER, type EnqueuedMessage, type OutboxMessage } from '../core/message.js';
import {
  ATTR,
  OUTBOX_MESSAGING_SYSTEM,
  outboxTracer,
  recordFailure,
  tracerRegistered,
} from '../core/telemetry.js';
import { traceHeadersOf } from '../core/trace.js';
import {
  checkName,
  resolveLimits,
  validateMessages,
  type ValidationLimits,
  type ValidMessage,
} from '../core/validate.js';
import { approvalLink, type ApprovalLinkOptions } from '../core/approval-links.js';
import { insertApprovalRequestsSql } from '../sql/approval-requests.js';
import { insertMessagesSql } from '../sql/insert-messages.js';
import { AUTOCOMMIT_OPT_IN, isSqlExecutor, type SqlExecutor } from '../store/sql-executor.js';
import { preparable } from '../store/statement-name.js';
import { insertKeyed, resolveDedupeWindowMs } from './keyed-insert.js';
import { insertLaneMessages } from './lane-insert.js';
import { holdLaneMessages } from './lane-holds.js';
import { byAggregate, inInputOrder, type InsertedRow } from './inserted-rows.js';

/** Options of {@link createOutbox}. */
export interface OutboxOptions {
  /** Schema holding the `outbox` table. Default `public`. */
  schema?: string;
  /** Largest serialised payload accepted, in bytes. Default 1 MiB (1048576). */
  maxPayloadBytes?: number;
  /** Largest serialised headers object accepted, in bytes. Default 64 KiB. */
  maxHeadersBytes?: number;
  /** `schema_version` header written when a message gives none. Default `"1"`. */
  defaultSchemaVersion?: string;
  /**
   * Write the trace context of each `enqueue()` call's `create` span (a child of the active
   * OpenTelemetry span) as the messages' `traceparent` header, so the dispatch and the consumer
   * join the caller's trace. With no OpenTelemetry SDK installed that is the active span's own
   * context (none without one). A header the message sets itself wins. Default true.
   */
  captureTraceContext?: boolean;
  /**
   * Also write an approval request for every held message (`requiresApproval: true`): one
   * message on `topic`, in the same transaction, carrying `{ messageId, topic, aggregateId,
   * sequence, requestedBy, expiresAt, payload }` of the held message — route it to a chat webhook
   * so a person hears of it (sql/approval-requests.ts). Never held, never ordered behind the
   * message it asks about. `includePayload: false` leaves the held payload out. Default: none.
   *
   * With `links`, each request also carries `approvalLink`: a signed link (see `approvalLink`)
   * a person opens to approve or reject — served by `createApprovalHandler` at `links.url`.
   *
   * @example createOutbox({ approvalRequests: { topic: 'approvals.requested' } })
   */
  approvalRequests?: {
    topic: string;
    includePayload?: boolean;
    links?: Omit<ApprovalLinkOptions, 'now'>;
  };
  /**
   * How long a message's `dedupeKey` keeps deduplicating, in milliseconds from the transaction's
   * start: a message with the same key written within it is not written (`deduped: true`). The
   * window is fixed when the key is written (its `dedupe_expires_at`), and the key is kept in
   * `outbox_dedupe_keys` until then even if retention removes the message's row sooner; the
   * retention job prunes expired keys. Default 30 days.
   *
   * @example createOutbox({ dedupeWindowMs: 24 * 60 * 60 * 1000 }) // one day
   */
  dedupeWindowMs?: number;
  /**
   * Which engine's tables to write (issue 43). Default: the engine the schema records (migration
   * 036: `outbox engine`, `setDatabaseEngine`; lanes for a new schema, claims for one migrated
   * before migration 36), read at the
   * first enqueue and kept by this writer. `'claims'` writes `outbox`, published by
   * `createDispatcher`; `'lanes'` writes `outbox_lane_messages` (migration 024), published by
   * `createLaneDispatcher`: nothing is written per message when it is published. The lanes
   * engine takes `delayMs`, `availableAt`, `dedupeKey` (and `onDuplicate`), `shadow`,
   * `requiresApproval` and `approvalRequests` (with `links`: serve them with
   * `createApprovalHandler({ engine: 'lanes' })`) as the claim engine does (migrations 026, 027).
   */
  engine?: 'claims' | 'lanes';
}

/** Per-call options of {@link OutboxWriter.enqueue}. */
export interface EnqueueOptions {
  /**
   * OpenTelemetry context to start the call's `create` span in (its parent). Default: the active
   * context. For callers that cannot rely on a context manager: the agent tool helper passes its
   * tool-call span this way, so the trace holds even when no SDK is installed.
   */
  context?: Context;
  /**
   * What a message whose `dedupeKey` was already written within the window does: `'return'`
   * (default) writes nothing for it and returns the first message with `deduped: true`;
   * `'reject'` throws `OutboxDuplicateError` (key and first message id) and writes nothing
   * of the whole call — the transaction stays usable. Messages without a key are never affected.
   */
  onDuplicate?: 'return' | 'reject';
  /**
   * Write even when the executor says it is not inside a transaction (a `pg` Pool, a client that
   * never ran `BEGIN`, an ORM's top-level object): the messages then commit by themselves, apart
   * from any business rows — a lone message, on purpose. Without it such a call throws
   * `OutboxAutocommitError` and writes nothing. Also the way through for a transaction the
   * adapter cannot see (a Kysely `db.connection()` on which you ran `BEGIN` yourself). Default
   * false.
   */
  allowAutocommit?: boolean;
}

/** Writes messages on the caller's transaction. Create one with {@link createOutbox}. */
export interface OutboxWriter {
  /** The schema this writer inserts into. */
  readonly schema: string;
  /**
   * Validates and inserts messages on `executor`, which must be the caller's open transaction.
   * Nothing is written when any message is invalid; an empty array writes nothing. An executor
   * its adapter knows to be outside a transaction (`fromPg(pool)`, a client that never ran
   * `BEGIN`, an ORM's top-level object) is refused with `OutboxAutocommitError`, nothing
   * written, unless `options.allowAutocommit` is set. The rows
   * become visible to dispatchers only when the caller commits — and vanish if it rolls back.
   */
  enqueue(
    executor: SqlExecutor,
    message: OutboxMessage,
    options?: EnqueueOptions,
  ): Promise<EnqueuedMessage>;
  enqueue(
    executor: SqlExecutor,
    messages: readonly OutboxMessage[],
    options?: EnqueueOptions,
  ): Promise<EnqueuedMessage[]>;
}

/**
 * Creates the writer.
 *
 * @example
 * ```ts
 * const outbox = createOutbox();
 * await db.transaction().execute(async (trx) => {
 *   const order = await trx.insertInto('orders').values(row).returning('id').executeTakeFirstOrThrow();
 *   await outbox.enqueue(fromKysely(trx), [
 *     { topic: 'payment.charge', aggregateId: `order:${order.id}`, payload: { orderId: order.id } },
 *     { topic: 'mail.send', aggregateId: `order:${order.id}`, payload: { template: 'receipt' } },
 *   ]);
 * });
 * ```
 */
export function createOutbox(options: OutboxOptions = {}): OutboxWriter {
  const schemaName = options.schema ?? DEFAULT_SCHEMA;
  const engineOf = engineOnce(options.engine, schemaName);
  const sql = preparable(insertMessagesSql(quoteIdentifier(schemaName)));
  const limits: ValidationLimits = resolveLimits({
    maxPayloadBytes: options.maxPayloadBytes,
    maxHeadersBytes: options.maxHeadersBytes,
  });
  const defaultSchemaVersion = options.defaultSchemaVersion ?? '1';
  const captureTrace = options.captureTraceContext ?? true;
  const requests = approvalRequestsOf(options.approvalRequests);
  const requestSql = requests && insertApprovalRequestsSql(quoteIdentifier(schemaName));
  const dedupeWindowMs = resolveDedupeWindowMs(options.dedupeWindowMs);

  async function enqueueMany(
    executor: SqlExecutor,
    messages: readonly OutboxMessage[],
    parent: Context,
    onDuplicate: EnqueueOptions['onDuplicate'],
    allowAutocommit: boolean,
  ): Promise<EnqueuedMessage[]> {
    if (onDuplicate !== undefined && onDuplicate !== 'return' && onDuplicate !== 'reject')
      throw new OutboxValidationError(
        'onDuplicate',
        `must be 'return' or 'reject', got ${JSON.stringify(onDuplicate)}`,
      );
    if (!isSqlExecutor(executor)) {
      throw new OutboxValidationError(
        'executor',
        'must be a SqlExecutor: wrap your transaction with fromPg(), fromKysely() or fromPglite()',
      );
    }
    if (!Array.isArray(messages))
      throw new OutboxValidationError('messages', 'must be a message object or an array of them');
    // Before the empty-batch shortcut: a call on a pool is a mistake whatever the batch holds.
    const outside = allowAutocommit ? undefined : executor.outsideTransaction?.();
    if (messages.length === 0 && outside === undefined) return [];
    // No SDK: no span to make (it would be the API's no-op); the caller's trace context, if
    // any, is captured from the parent as the no-op span would have carried it.
    if (!tracerRegistered()) {
      if (outside !== undefined) throw autocommitRefused(outside);
      const caller = captureTrace ? trace.getSpanContext(parent) : undefined;
      return insert(
        executor,
        messages,
        caller ? traceHeadersOf(caller) : {},
        onDuplicate === 'reject',
      );
    }
    const span = startCreateSpan(messages, parent);
    try {
      if (outside !== undefined) throw autocommitRefused(outside);
      const enqueued = await insert(
        executor,
        messages,
        captureTrace ? traceHeadersOf(span.spanContext()) : {},
        onDuplicate === 'reject',
      );
      if (enqueued.length === 1) span.setAttribute(ATTR.messagingMessageId, enqueued[0]!.messageId);
      return enqueued;
    } catch (error) {
      recordFailure(span, error instanceof Error ? error.name : 'Error', error);
      throw error;
    } finally {
      span.end();
    }
  }

  async function insert(
    executor: SqlExecutor,
    messages: readonly OutboxMessage[],
    traceHeaders: Record<string, string>,
    reject: boolean,
  ): Promise<EnqueuedMessage[]> {
    const valid = validateMessages(messages, limits);
    const engine = await engineOf(executor);
    const headersOf = (index: number) =>
      headersJson(
        valid[index]!,
        messages[index] as OutboxMessage,
        traceHeaders,
        defaultSchemaVersion,
      );
    const json = (message: ValidMessage, index: number) =>
      rowJson(message, headersOf(index), engine === 'lanes');
    if (engine === 'lanes') {
      const settings = { schema: schemaName, dedupeWindowMs, reject };
      const written = await insertLaneMessages(executor, valid, json, settings);
      return holdLaneMessages(executor, valid, written, { ...settings, requests, headersOf });
    }
    // Messages using the columns of migration 013 take the longer statement; the others the usual.
    const enqueued = valid.some(
      (m) => m.dedupeKey !== undefined || m.approval?.onExpiry === 'approve',
    )
      ? await insertKeyed(executor, valid, json, { schema: schemaName, dedupeWindowMs, reject })
      : await insertPlain(executor, valid, json);
    return requestApprovals(executor, enqueued);
  }

  /** A batch without dedupe keys: one statement, exactly as before keys existed. */
  async function insertPlain(
    executor: SqlExecutor,
    valid: readonly ValidMessage[],
    json: (message: ValidMessage, index: number) => string,
  ): Promise<EnqueuedMessage[]> {
    const batch = valid.map((message, index) => ({
      aggregateId: message.aggregateId,
      json: json(message, index),
    }));
    // One global lock order for the aggregates' sequence counters (see insert-messages.ts).
    // Array.prototype.sort is stable: positions within an aggregate keep the caller's order.
    if (batch.length > 1) batch.sort(byAggregate);
    const { rows } = await executor.query<InsertedRow>(sql, [
      `[${batch.map((row) => row.json).join(',')}]`,
    ]);
    if (rows.length !== valid.length) {
      throw new Error(
        `agent-outbox: inserted ${rows.length} rows for ${valid.length} messages; is a trigger or rule on the outbox table dropping rows?`,
      );
    }
    return inInputOrder(valid, rows);
  }

  /** Writes the approval requests of the held messages just written (`approvalRequests`). */
  async function requestApprovals(
    executor: SqlExecutor,
    enqueued: EnqueuedMessage[],
  ): Promise<EnqueuedMessage[]> {
    if (!requests || !requestSql) return enqueued;
    const held = enqueued.filter((m) => m.awaitingApproval);
    if (held.length === 0) return enqueued;
    const { rows: written } = await executor.query<{ messageId: string; heldMessageId: string }>(
      requestSql,
      [
        held.map((m) => m.id),
        requests.topic,
        requests.includePayload,
        requests.links
          ? JSON.stringify(
              Object.fromEntries(held.map((m) => [m.messageId, approvalLink(m, requests.links!)])),
            )
          : null,
      ],
    );
    const requestOf = new Map(written.map((r) => [r.heldMessageId, r.messageId]));
    return enqueued.map((m) => {
      const requestId = requestOf.get(m.messageId);
      return requestId ? { ...m, approvalRequestId: requestId } : m;
    });
  }

  return {
    schema: schemaName,
    enqueue: (async (
      executor: SqlExecutor,
      input: OutboxMessage | readonly OutboxMessage[],
      callOptions?: EnqueueOptions,
    ) => {
      const parent = callOptions?.context ?? context.active();
      const onDuplicate = callOptions?.onDuplicate;
      const allow = callOptions?.allowAutocommit === true;
      if (Array.isArray(input)) return enqueueMany(executor, input, parent, onDuplicate, allow);
      const [one] = await enqueueMany(
        executor,
        [input as OutboxMessage],
        parent,
        onDuplicate,
        allow,
      );
      return one;
    }) as OutboxWriter['enqueue'],
  };
}

/** The writer's `approvalRequests` option, checked once, or undefined. */
function approvalRequestsOf(option: OutboxOptions['approvalRequests']) {
  if (option === undefined) return undefined;
  if (typeof option !== 'object' || option === null)
    throw new OutboxValidationError(
      'approvalRequests',
      "must be an object like { topic: 'approvals.requested' }",
    );
  const topic = checkName('approvalRequests.topic', option.topic);
  if (option.includePayload !== undefined && typeof option.includePayload !== 'boolean')
    throw new OutboxValidationError('approvalRequests.includePayload', 'must be a boolean');
  if (option.links !== undefined) {
    // Checked now, with a stand-in id, rather than at the first held message.
    approvalLink({ messageId: '00000000-0000-7000-8000-000000000000' }, option.links);
  }
  return { topic, includePayload: option.includePayload ?? true, links: option.links };
}

/**
 * The `create` span of one `enqueue()` call (kind PRODUCER, messaging semantic conventions):
 * named after the topic when the call has one, with the message count for a batch. Started
 * before validation so that a rejected call shows up failed in the caller's trace.
 */
/** `enqueue()` on an executor outside a transaction (`outside` says why), nothing written. */
function autocommitRefused(outside: string): OutboxAutocommitError {
  return new OutboxAutocommitError(
    `agent-outbox: enqueue() refused to write outside a transaction, and wrote nothing. ${outside} ${AUTOCOMMIT_OPT_IN}`,
  );
}

function startCreateSpan(messages: readonly OutboxMessage[], parent: Context) {
  const first = (messages[0] as Partial<OutboxMessage> | undefined)?.topic;
  const topic =
    typeof first === 'string' &&
    messages.every((m) => (m as Partial<OutboxMessage> | undefined)?.topic === first)
      ? first
      : undefined;
  const attributes: Record<string, string | number> = {
    [ATTR.messagingSystem]: OUTBOX_MESSAGING_SYSTEM,
    [ATTR.messagingOperationName]: 'create',
    [ATTR.messagingOperationType]: 'create',
  };
  if (topic !== undefined) attributes[ATTR.messagingDestinationName] = topic;
  if (messages.length > 1) attributes[ATTR.messagingBatchMessageCount] = messages.length;
  return outboxTracer().startSpan(
    topic === undefined ? 'create' : `create ${topic}`,
    { kind: SpanKind.PRODUCER, attributes },
    parent,
  );
}

/**
 * The headers a message is written with. Caller-provided headers win over captured ones: an
 * explicit traceparent is a decision.
 */
function headersJson(
  message: ValidMessage,
  original: OutboxMessage,
  traceHeaders: Record<string, string>,
  defaultSchemaVersion: string,
): Record<string, string> {
  return {
    ...traceHeaders,
    [HEADER.schemaVersion]: String(original.schemaVersion ?? defaultSchemaVersion),
    ...(original.tenantId !== undefined ? { [HEADER.tenantId]: original.tenantId } : {}),
    ...message.headers,
  };
}

/**
 * One element of the statement's jsonb array (keys as insert-messages.ts reads them), as JSON
 * text. The payload goes in as the text validation already produced: parsing it back only to
 * serialise it again cost a parse and a stringify of every payload (up to 1 MiB each).
 *
 * On the lanes engine a held message is written due at infinity (migration 027): its decision
 * row (writer/lane-holds.ts) keeps the time it was written for.
 */
function rowJson(message: ValidMessage, headers: Record<string, string>, lanes: boolean): string {
  const heldOnLanes = lanes && message.approval !== undefined;
  const at = heldOnLanes
    ? '"infinity"'
    : message.availableAt
      ? JSON.stringify(message.availableAt.toISOString())
      : 'null';
  return (
    `{"a":${JSON.stringify(message.aggregateId)},"t":${JSON.stringify(message.topic)}` +
    `,"p":${message.payloadJson},"h":${JSON.stringify(headers)}` +
    `,"at":${at},"d":${heldOnLanes ? 0 : JSON.stringify(message.delayMs)}${message.shadow ? ',"s":true' : ''}` +
    `${message.ordered === undefined ? '' : `,"o":${message.ordered}`}${approvalJson(message)}` +
    `${message.dedupeKey === undefined ? '' : `,"k":${JSON.stringify(message.dedupeKey)}`}}`
  );
}

/** The keys of a held message (insert-messages.ts), or nothing. */
function approvalJson({ approval }: ValidMessage): string {
  if (!approval) return '';
  return (
    `,"ap":"awaiting"` +
    `${approval.expiresInMs === undefined ? '' : `,"ae":${approval.expiresInMs}`}` +
    `${approval.requestedBy === undefined ? '' : `,"ar":${JSON.stringify(approval.requestedBy)}`}` +
    `${approval.onExpiry === 'approve' ? ',"ax":"approve"' : ''}`
  );
}
