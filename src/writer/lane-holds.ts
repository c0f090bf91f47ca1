import { approvalLink, type ApprovalLinkOptions } from '../core/approval-links.js';
import { quoteIdentifier } from '../core/identifier.js';
import { HEADER, type EnqueuedMessage } from '../core/message.js';
import { MAX_NAME_LENGTH, type ValidMessage } from '../core/validate.js';
import { insertLaneApprovalsSql } from '../sql/lane-approvals.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { preparable } from '../store/statement-name.js';
import { insertLaneMessages, type LaneInsertSettings } from './lane-insert.js';

/** The writer's `approvalRequests`, checked (create-outbox.ts). */
export interface LaneApprovalRequests {
  topic: string;
  includePayload: boolean;
  /** Signed approval links (`approvalLink`), checked: each request carries one. */
  links?: Omit<ApprovalLinkOptions, 'now'>;
}

const statements = new Map<string, string>();
function sqlOf(schema: string): string {
  let sql = statements.get(schema);
  if (!sql)
    statements.set(schema, (sql = preparable(insertLaneApprovalsSql(quoteIdentifier(schema)))));
  return sql;
}

/**
 * The held messages of a lanes writer's call (migration 027), after the messages were written
 * (with `available_at = infinity`, create-outbox.ts): their decision rows in one statement, then,
 * with `approvalRequests`, one request message each, written by the lanes writer as any message
 * (unordered, on the aggregate `approval:<aggregate>`, the held message's trace context and
 * tenant), with the claim engine's payload (sql/approval-requests.ts; `approvalLink` with
 * `links`, served by `createApprovalHandler({ engine: 'lanes' })`). A call without held
 * messages runs nothing here. A held message answered by a duplicate (`deduped`) was written by
 * an earlier call, with its own decision row: nothing is written for it.
 */
export async function holdLaneMessages(
  executor: SqlExecutor,
  valid: readonly ValidMessage[],
  enqueued: EnqueuedMessage[],
  settings: LaneInsertSettings & {
    requests: LaneApprovalRequests | undefined;
    /** The headers message `index` was written with (its trace context, tenant). */
    headersOf: (index: number) => Record<string, string>;
  },
): Promise<EnqueuedMessage[]> {
  const held = valid.flatMap((message, index) =>
    message.approval && !enqueued[index]!.deduped ? [index] : [],
  );
  if (held.length === 0) return enqueued;
  const rows = held.map((index) => {
    const { approval, aggregateId, availableAt, delayMs } = valid[index]!;
    const written = enqueued[index]!;
    return JSON.stringify({
      id: written.id,
      a: aggregateId,
      mi: written.messageId,
      ar: approval!.requestedBy,
      ae: approval!.expiresInMs,
      ax: approval!.onExpiry,
      at: availableAt?.toISOString(),
      d: delayMs,
    });
  });
  const { rows: decided } = await executor.query<{ messageId: string; expiresAt: string }>(
    sqlOf(settings.schema),
    [`[${rows.join(',')}]`],
  );
  const expiresAt = new Map(decided.map((r) => [r.messageId, r.expiresAt]));
  const isHeld = new Set(held);
  const result = enqueued.map((m, index) =>
    isHeld.has(index) ? { ...m, awaitingApproval: true as const } : m,
  );
  if (!settings.requests) return result;

  const requests = settings.requests;
  const asks = held.map((index) =>
    requestOf(valid[index]!, settings.headersOf(index), result[index]!, expiresAt, requests),
  );
  const written = await insertLaneMessages(executor, asks, (m) => rowJsonOf(m), {
    ...settings,
    reject: false,
  });
  held.forEach((index, i) => {
    result[index] = { ...result[index]!, approvalRequestId: written[i]!.messageId };
  });
  return result;
}

/** The approval request of one held message, as a message the lanes writer takes. */
function requestOf(
  message: ValidMessage,
  stored: Record<string, string>,
  written: EnqueuedMessage,
  expiresAt: ReadonlyMap<string, string>,
  requests: LaneApprovalRequests,
): ValidMessage {
  const payload =
    `{"messageId":${JSON.stringify(written.messageId)},"topic":${JSON.stringify(message.topic)}` +
    `,"aggregateId":${JSON.stringify(message.aggregateId)},"sequence":${written.sequence}` +
    `,"requestedBy":${JSON.stringify(message.approval!.requestedBy ?? null)}` +
    `,"expiresAt":${JSON.stringify(expiresAt.get(written.messageId) ?? null)}` +
    `,"onExpiry":${JSON.stringify(message.approval!.onExpiry)}` +
    `${requests.includePayload ? `,"payload":${message.payloadJson}` : ''}` +
    // Signed here, as on the claim engine: the secret never reaches SQL.
    `${requests.links ? `,"approvalLink":${JSON.stringify(approvalLink(written, requests.links))}` : ''}}`;
  const headers: Record<string, string> = { [HEADER.schemaVersion]: '1' };
  for (const name of [HEADER.traceparent, HEADER.tracestate, HEADER.tenantId]) {
    const value = stored[name];
    if (value !== undefined) headers[name] = value;
  }
  return {
    topic: requests.topic,
    aggregateId: `approval:${message.aggregateId}`.slice(0, MAX_NAME_LENGTH),
    payloadJson: payload,
    headers,
    availableAt: undefined,
    delayMs: 0,
    shadow: false,
    ordered: false,
    approval: undefined,
    dedupeKey: undefined,
  };
}

/** The lanes insert's row JSON of a request (keys as sql/lanes.ts `insertLaneMessagesSql`). */
function rowJsonOf(m: ValidMessage): string {
  return (
    `{"a":${JSON.stringify(m.aggregateId)},"t":${JSON.stringify(m.topic)},"p":${m.payloadJson}` +
    `,"h":${JSON.stringify(m.headers)},"at":null,"d":0,"o":false}`
  );
}
