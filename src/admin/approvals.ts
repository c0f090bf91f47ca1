import { OutboxValidationError } from '../core/errors.js';
import { engineFor } from './database-engine.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import type { DeadLetterPolicy } from '../dispatcher/options.js';
import { approveSql, expireSql, rejectSql, wakeAfterApprovalSql } from '../sql/approvals.js';
import { laneExpireSql } from '../sql/lane-approvals.js';
import { notifyChannel } from '../sql/notify.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import {
  approveLaneMessages,
  listLaneAwaitingApproval,
  rejectLaneMessages,
} from '../lanes/lane-approvals.js';
import {
  listAwaitingApproval as listClaimAwaiting,
  type AwaitingApproval,
} from './awaiting-approval.js';
import { checkPolicy, decide, requiredText, type DecidedMessage } from './approval-decisions.js';

export {
  OutboxApprovalError,
  type ApprovalState,
  type DecidedMessage,
  type DecisionProblem,
} from './approval-decisions.js';
export type { AwaitingApproval } from './awaiting-approval.js';

/**
 * Which engine's held messages a decision, list or sweep is about (default: the schema's,
 * `readDatabaseEngine`): `'claims'` (the
 * `outbox` table) or `'lanes'` (migration 027: `createOutbox({ engine: 'lanes' })`'s messages,
 * ids as the lanes writer returns them, or message ids). Same semantics on both.
 */
export type ApprovalEngine = 'claims' | 'lanes';

async function lanesEngine(
  executor: SqlExecutor,
  options: { engine?: unknown; schema?: string | undefined },
): Promise<boolean> {
  return (await engineFor(executor, options.engine, options.schema)) === 'lanes';
}

/**
 * Messages waiting for a decision, oldest first (`topic` is a glob, `payment.*`). With
 * `tenantId`, only that tenant's messages (their `tenant_id` header). `engine: 'lanes'` lists the
 * lanes engine's.
 */
export async function listAwaitingApproval(
  executor: SqlExecutor,
  options: {
    schema?: string;
    topic?: string;
    limit?: number;
    tenantId?: string;
    engine?: ApprovalEngine;
  } = {},
): Promise<AwaitingApproval[]> {
  return (await lanesEngine(executor, options))
    ? listLaneAwaitingApproval(executor, options)
    : listClaimAwaiting(executor, options);
}

/** Options of {@link approveMessages}. */
export interface ApproveOptions {
  /** Who decides (a person's name or handle): kept with the message. Required. */
  by: string;
  /** Why, optionally: kept with the message. */
  note?: string;
  schema?: string;
  /** Which engine's messages (default: the schema's): see {@link ApprovalEngine}. */
  engine?: ApprovalEngine;
}

/** Options of {@link rejectMessages}. */
export interface RejectOptions {
  /** Who decides: kept with the message. Required. */
  by: string;
  /** Why: kept with the message, and shown to the agent that asked. Required. */
  reason: string;
  /**
   * What a rejected ORDERED message does to the later messages of its aggregate — the same
   * choice as the dispatchers' `deadLetterPolicy`, and it should be the same value: `hold`
   * (default) keeps them waiting behind it, for good; `skip` lets them go.
   */
  deadLetterPolicy?: DeadLetterPolicy;
  schema?: string;
  /** Which engine's messages (default: the schema's): see {@link ApprovalEngine}. */
  engine?: ApprovalEngine;
}

/**
 * Approves held messages (row ids or message ids): each becomes due — at once, or at the time
 * it was written to go out at — and is dispatched like any other message. Records who, when and
 * the note with each message. All or nothing: when any of them cannot be approved (already
 * decided, expired, not held, not found) nothing is approved and {@link OutboxApprovalError}
 * says why. Idle dispatchers listening for NOTIFY are woken.
 *
 * @example
 * ```ts
 * await approveMessages(fromPg(pool), ['42'], { by: 'alice', note: 'checked with the customer' });
 * ```
 */
export async function approveMessages(
  executor: SqlExecutor,
  ids: readonly string[],
  options: ApproveOptions,
): Promise<DecidedMessage[]> {
  if (await lanesEngine(executor, options)) return approveLaneMessages(executor, ids, options);
  const schemaName = options.schema ?? DEFAULT_SCHEMA;
  const schema = quoteIdentifier(schemaName);
  const by = requiredText('by', options.by);
  const note =
    options.note === undefined || options.note.trim() === ''
      ? null
      : requiredText('note', options.note);
  const decided = await decide(executor, ids, 'approve', approveSql(schema), (r, m) => [
    r,
    m,
    by,
    note,
  ]);
  await executor
    .query(wakeAfterApprovalSql(schema), [notifyChannel(schemaName)])
    .catch(() => undefined); // a hint only: polling finds the message anyway
  return decided;
}

/**
 * Rejects held messages (row ids or message ids): kept, never published, visible (`outbox status`,
 * the effect status tool), with who, when and the reason. A rejected ordered message follows
 * `deadLetterPolicy` (see {@link RejectOptions}). All or nothing, like {@link approveMessages}.
 *
 * @example
 * ```ts
 * await rejectMessages(fromPg(pool), ['42'], { by: 'alice', reason: 'duplicate refund' });
 * ```
 */
export async function rejectMessages(
  executor: SqlExecutor,
  ids: readonly string[],
  options: RejectOptions,
): Promise<DecidedMessage[]> {
  if (await lanesEngine(executor, options)) return rejectLaneMessages(executor, ids, options);
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const by = requiredText('by', options.by);
  const reason = requiredText('reason', options.reason);
  const policy = checkPolicy(options.deadLetterPolicy);
  return decide(executor, ids, 'reject', rejectSql(schema), (r, m) => [
    r,
    m,
    by,
    reason,
    policy === 'skip',
  ]);
}

/**
 * Expires up to `batchSize` (default 100) held messages whose expiry has passed, applying
 * `deadLetterPolicy` as a rejection does — or approves those written with
 * `approvalOnExpiry: 'approve'` (`state: 'approved'`); returns them. Dispatchers run it themselves (see
 * `PgOutboxStore`; lane dispatchers too, with `engine: 'lanes'`); call it from a scheduled job
 * if none runs.
 */
export async function expireApprovals(
  executor: SqlExecutor,
  options: {
    schema?: string;
    deadLetterPolicy?: DeadLetterPolicy;
    batchSize?: number;
    engine?: ApprovalEngine;
  } = {},
): Promise<{ id: string; messageId: string; topic: string; state: 'expired' | 'approved' }[]> {
  const lanes = await lanesEngine(executor, options);
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const policy = checkPolicy(options.deadLetterPolicy);
  const batchSize = options.batchSize ?? 100;
  if (!Number.isInteger(batchSize) || batchSize <= 0)
    throw new OutboxValidationError('batchSize', `must be a positive integer, got ${batchSize}`);
  // The lanes statement takes "hold" (an expiry blocks its aggregate), the claim one "skip".
  const { rows } = await executor.query<{
    id: string;
    messageId: string;
    topic: string;
    state: 'expired' | 'approved';
  }>(lanes ? laneExpireSql(schema) : expireSql(schema), [
    batchSize,
    lanes ? policy === 'hold' : policy === 'skip',
  ]);
  return rows.map((r) => ({ ...r, id: String(r.id) }));
}
