/**
 * agent-outbox/agent — Claude Agent SDK tools whose side effects go through the outbox.
 * Needs the optional peers `@anthropic-ai/claude-agent-sdk` and `zod` (4).
 * @packageDocumentation
 */
export type { ApprovalPolicy } from './approval-policy.js';
export type { BoundOutbox } from './bound-outbox.js';
export {
  EFFECT_STATUS_INPUT,
  effectStatusTool,
  type EffectStatusToolOptions,
  type TenantOf,
} from './effect-status-tool.js';
export type { EffectState, EffectStatus } from '../admin/effect-status.js';
export {
  idempotencyKeyFor,
  idempotencyKeyHook,
  type IdempotencyKeyHookOptions,
} from './idempotency-key-hook.js';
export { connectInMemory, type InMemoryToolClient } from './in-memory-client.js';
export type { AdapterOptions, ApprovalMode } from './tool-call.js';
export {
  IDEMPOTENCY_KEY_FIELD,
  outboxTool,
  type OutboxToolOptions,
  type ToolCallContext,
  type ToolInput,
  type ToolScope,
  type WithIdempotencyKey,
} from './outbox-tool.js';
export { createToolServer, type ToolServerOptions } from './tool-server.js';
export {
  outboxApprovalHook,
  outboxCanUseTool,
  type OutboxCanUseToolOptions,
  type OutboxPermissionOptions,
} from './call-permission.js';
export {
  decideCallApproval,
  expireCallApprovals,
  listCallApprovals,
  watchCallApprovals,
  type CallApproval,
  type CallApprovalState,
  type CallApprovalWatcher,
  type CallDecision,
  type DecideCallOptions,
  type WatchCallApprovalsOptions,
} from '../admin/call-approvals.js';
export type { QueuedEffect } from './tool-result.js';
export { newTraceContext, parseTraceparent, type TraceContext } from './trace-context.js';
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
