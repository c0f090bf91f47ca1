import {
  checkPolicy,
  decide,
  requiredText,
  type DecidedMessage,
} from '../admin/approval-decisions.js';
import { awaitingReader } from '../admin/awaiting-approval.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import type { DeadLetterPolicy } from '../dispatcher/options.js';
import { wakeAfterApprovalSql } from '../sql/approvals.js';
import { laneDecideSql, listLaneAwaitingSql } from '../sql/lane-approvals.js';
import { notifyChannel } from '../sql/notify.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/**
 * Held messages of the lanes engine (migration 027): the claim engine's decisions
 * (admin/approvals.ts) on `outbox_lane_approvals`. `approveMessages`, `rejectMessages`,
 * `listAwaitingApproval` and `expireApprovals` call these with `engine: 'lanes'`; ids are a lane
 * message's `id` (digits, as the writer returns it) or its message id (UUID).
 */

/** Approves held lane messages, as `approveMessages` does on the claim engine. */
export async function approveLaneMessages(
  executor: SqlExecutor,
  ids: readonly string[],
  options: { by: string; note?: string; schema?: string },
): Promise<DecidedMessage[]> {
  const schemaName = options.schema ?? DEFAULT_SCHEMA;
  const schema = quoteIdentifier(schemaName);
  const by = requiredText('by', options.by);
  const note =
    options.note === undefined || options.note.trim() === ''
      ? null
      : requiredText('note', options.note);
  const decided = await decide(executor, ids, 'approve', laneDecideSql(schema), (r, m) => [
    r,
    m,
    'approved',
    by,
    note,
    false,
  ]);
  await executor
    .query(wakeAfterApprovalSql(schema), [notifyChannel(schemaName)])
    .catch(() => undefined); // a hint only: the parked path finds the message anyway
  return decided;
}

/** Rejects held lane messages, as `rejectMessages` does on the claim engine. */
export async function rejectLaneMessages(
  executor: SqlExecutor,
  ids: readonly string[],
  options: { by: string; reason: string; deadLetterPolicy?: DeadLetterPolicy; schema?: string },
): Promise<DecidedMessage[]> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const by = requiredText('by', options.by);
  const reason = requiredText('reason', options.reason);
  const policy = checkPolicy(options.deadLetterPolicy);
  return decide(executor, ids, 'reject', laneDecideSql(schema), (r, m) => [
    r,
    m,
    'rejected',
    by,
    reason,
    policy === 'hold',
  ]);
}

/** Held lane messages waiting for a decision, as `listAwaitingApproval` on the claim engine. */
export const listLaneAwaitingApproval = awaitingReader(listLaneAwaitingSql);
