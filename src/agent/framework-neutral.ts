/**
 * What every framework adapter (`agent-outbox/ai-sdk`, `agent-outbox/openai-agents`,
 * `agent-outbox/langchain`) re-exports beside its own tool builders: the tool definition's types
 * and the transaction runners. Nothing here imports an agent framework, so an adapter's entry
 * point loads without the Claude Agent SDK (which `agent-outbox/agent` needs).
 */
export type { ApprovalPolicy } from './approval-policy.js';
export type { BoundOutbox } from './bound-outbox.js';
export {
  EFFECT_STATUS_INPUT,
  type EffectStatusToolOptions,
  type TenantOf,
} from './effect-status-call.js';
export type { EffectState, EffectStatus } from '../admin/effect-status.js';
export {
  IDEMPOTENCY_KEY_FIELD,
  type AdapterOptions,
  type ApprovalMode,
  type OutboxToolDefinition,
  type ToolCallContext,
  type ToolInput,
  type ToolScope,
  type WithIdempotencyKey,
} from './tool-call.js';
export type { QueuedEffect } from './tool-result.js';
export {
  decideCallApproval,
  expireCallApprovals,
  getCallApproval,
  listCallApprovals,
  watchCallApprovals,
  type CallApproval,
  type CallApprovalState,
  type CallApprovalWatcher,
  type CallDecision,
  type DecideCallOptions,
  type WatchCallApprovalsOptions,
} from '../admin/call-approvals.js';
export {
  drizzleTransactions,
  postgresJsTransactions,
  prismaTransactions,
} from './orm-transactions.js';
export {
  kyselyTransactions,
  pgliteTransactions,
  pgPoolTransactions,
  type KyselyTransactional,
  type PgliteTransactional,
  type PgPoolClientLike,
  type PgPoolLike,
  type TransactionRunner,
} from './transaction-runner.js';
