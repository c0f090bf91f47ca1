import { OutboxValidationError } from '../core/errors.js';
import { engineFor } from './database-engine.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import { redactSecrets } from '../core/redact.js';
import { laneMessagesStatusSql, messagesStatusSql, performedSql } from '../sql/effect-status.js';
import { messagesOfKeySql } from '../sql/tool-calls.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/**
 * Where an effect stands, as a person (or a model) would say it:
 *
 * ```
 *   awaiting approval ──approve──▶ pending ⇄ failed (retrying) ──▶ published ──▶ performed
 *          │  └──reject──▶ rejected                    └──▶ dead (stopped retrying)
 *          └──no decision in time──▶ expired
 * ```
 *
 * `performed` needs the consumer's ledger in this database (the consumers named in the query);
 * `not found` is also what another tenant's message, or one pruned by retention, reads as.
 */
export type EffectState =
  | 'awaiting approval'
  | 'pending'
  | 'failed'
  | 'published'
  | 'performed'
  | 'dead'
  | 'rejected'
  | 'expired'
  | 'not found';

/** One message's status. Times are ISO 8601 strings (this is JSON for a model). */
export interface EffectStatus {
  messageId: string;
  state: EffectState;
  topic?: string;
  aggregateId?: string;
  /** Publish attempts so far (pending, failed, dead). */
  attempts?: number;
  /** When the next publish attempt is due (pending, failed). */
  nextTryAt?: string;
  /** The last publish error, secrets redacted (failed, dead). */
  lastError?: string;
  publishedAt?: string;
  /** Who performed it, when (performed). */
  performedBy?: { consumer: string; at: string }[];
  /** Awaiting approval: when it expires undecided. */
  expiresAt?: string;
  /** Approved, rejected or expired: who decided (`expiry` for an expiry), when, and why. */
  decidedBy?: string;
  decidedAt?: string;
  /** The rejection's reason, or the approval's note. */
  reason?: string;
}

/** What to look up: message ids, or the messages of a tool call by its idempotency key. */
export interface EffectStatusQuery {
  messageIds?: readonly string[];
  idempotencyKey?: string;
  /** With `idempotencyKey`: only that tool's call. */
  tool?: string;
  /** Only this tenant's messages (their `tenant_id` header); others read as `not found`. */
  tenantId?: string;
  /** Consumer names whose ledger (`processed_messages`) says `performed`. */
  consumers?: readonly string[];
  schema?: string;
  /** Most messages reported per call. Default 50. */
  limit?: number;
  /**
   * Which engine's messages (default: the schema's, `readDatabaseEngine`; `'claims'` is the
   * `outbox` table): `'lanes'` reads the lanes
   * engine's (`createOutbox({ engine: 'lanes' })`), where `messageIds` may also be the row ids
   * the lanes writer returns (`id`, digits): a lookup by row id is a primary-key probe per lane,
   * one by message id a probe of the `message_id` index (migration 032; docs/lanes.md).
   * A lanes message's `publishedAt` is unknown (the engine records no time when it publishes).
   */
  engine?: 'claims' | 'lanes';
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** A lanes row id, as the lanes writer returns it (a positive bigint). */
const ROW_ID = /^[1-9][0-9]{0,18}$/;

interface StatusRow {
  messageId: string;
  topic: string;
  aggregateId: string;
  approvalState: string | null;
  expiresAt: Date | string | null;
  /** `approve`: the expiry sweep approves it (migration 013); else it expires. */
  onExpiry: string | null;
  decidedBy: string | null;
  decidedAt: Date | string | null;
  note: string | null;
  dispatchedAt: Date | string | null;
  deadLetteredAt: Date | string | null;
  attempts: number;
  lastError: string | null;
  availableAt: Date | string | null;
  inFlight: boolean;
  now: Date | string;
  /** Lanes engine: published (no time is recorded). */
  published?: boolean;
  /** Lanes engine: the row id. */
  id?: string;
}

const iso = (value: Date | string | null): string | undefined =>
  value === null ? undefined : (value instanceof Date ? value : new Date(value)).toISOString();

/**
 * Reads the status of messages (read-only, bounded: at most `limit` ids, each an index probe).
 * Ids in the answer keep the order asked (or the tool call's order); unknown ones are
 * `not found`.
 */
export async function readEffectStatus(
  executor: SqlExecutor,
  query: EffectStatusQuery,
): Promise<{ effects: EffectStatus[]; truncated: number }> {
  const schema = quoteIdentifier(query.schema ?? DEFAULT_SCHEMA);
  const limit = query.limit ?? 50;
  const lanes = (await engineFor(executor, query.engine, query.schema)) === 'lanes';
  const ids: string[] = [];
  for (const id of query.messageIds ?? []) {
    if (typeof id !== 'string' || !(UUID.test(id) || (lanes && ROW_ID.test(id))))
      throw new OutboxValidationError(
        'messageIds',
        `"${String(id)}" is not a message id (UUID)${lanes ? ' nor a row id' : ''}`,
      );
    ids.push(id.toLowerCase());
  }
  if (query.idempotencyKey !== undefined) {
    const { rows } = await executor.query<{ tool: string; messageIds: string[] | null }>(
      messagesOfKeySql(schema),
      [query.idempotencyKey, query.tool ?? null, 10],
    );
    for (const row of rows) ids.push(...(row.messageIds ?? []));
  } else if (ids.length === 0) {
    throw new OutboxValidationError('query', 'give message ids or an idempotency key');
  }
  const unique = [...new Set(ids)];
  const wanted = unique.slice(0, limit);
  if (wanted.length === 0) return { effects: [], truncated: 0 };

  const values = [wanted, query.tenantId ?? null];
  const rows = lanes
    ? (
        await executor.query<StatusRow>(laneMessagesStatusSql(schema), [
          wanted.filter((id) => UUID.test(id)),
          wanted.filter((id) => ROW_ID.test(id)),
          query.tenantId ?? null,
        ])
      ).rows
    : await executor
        .query<StatusRow>(messagesStatusSql(schema), values)
        .catch(async (error: unknown) => {
          // undefined_function: a schema before migration 021 has no lookup of the batched log.
          if ((error as { code?: unknown }).code !== '42883') throw error;
          return executor.query<StatusRow>(messagesStatusSql(schema, true), values);
        })
        .then((result) => result.rows);
  const performed = new Map<string, { consumer: string; at: string }[]>();
  if ((query.consumers?.length ?? 0) > 0) {
    const done = await executor.query<{
      consumer: string;
      messageId: string;
      processedAt: Date | string;
    }>(performedSql(schema), [query.consumers, rows.map((r) => r.messageId)]);
    for (const d of done.rows) {
      const list = performed.get(d.messageId) ?? [];
      list.push({ consumer: d.consumer, at: iso(d.processedAt)! });
      performed.set(d.messageId, list);
    }
  }
  const byId = new Map(rows.map((r) => [r.messageId, r]));
  for (const r of rows) if (r.id !== undefined) byId.set(r.id, r);
  const effects = wanted.map((id) => {
    const row = byId.get(id);
    return row
      ? statusOf(row, performed.get(row.messageId))
      : { messageId: id, state: 'not found' as const };
  });
  return { effects, truncated: unique.length - wanted.length };
}

function statusOf(row: StatusRow, performedBy: EffectStatus['performedBy']): EffectStatus {
  const base = { messageId: row.messageId, topic: row.topic, aggregateId: row.aggregateId };
  const decision = {
    ...(row.decidedBy !== null && { decidedBy: row.decidedBy }),
    ...(row.decidedAt !== null && { decidedAt: iso(row.decidedAt) }),
    ...(row.note !== null && { reason: row.note }),
  };
  const now = new Date(row.now).getTime();
  if (row.approvalState === 'awaiting') {
    // Overdue but not swept yet: as the sweep will decide it (approved: pending until then).
    const expired = row.expiresAt !== null && new Date(row.expiresAt).getTime() <= now;
    if (expired && row.onExpiry === 'approve') return { ...base, state: 'pending' };
    return expired
      ? { ...base, state: 'expired', expiresAt: iso(row.expiresAt) }
      : { ...base, state: 'awaiting approval', expiresAt: iso(row.expiresAt) };
  }
  if (row.approvalState === 'rejected' || row.approvalState === 'expired')
    return { ...base, state: row.approvalState, ...decision };
  const approval = row.approvalState === 'approved' ? decision : {};
  if (row.dispatchedAt !== null || row.published === true) {
    const at = row.dispatchedAt === null ? {} : { publishedAt: iso(row.dispatchedAt) };
    if (performedBy && performedBy.length > 0)
      return { ...base, state: 'performed', ...at, performedBy, ...approval };
    return { ...base, state: 'published', ...at, ...approval };
  }
  const error = row.lastError === null ? {} : { lastError: redactSecrets(row.lastError, 500) };
  if (row.deadLetteredAt !== null)
    return { ...base, state: 'dead', attempts: Number(row.attempts), ...error, ...approval };
  return {
    ...base,
    state: row.lastError !== null && !row.inFlight ? 'failed' : 'pending',
    attempts: Number(row.attempts),
    ...(row.availableAt !== null && { nextTryAt: iso(row.availableAt) }),
    ...error,
    ...approval,
  };
}
