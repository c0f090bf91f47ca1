/**
 * agent-outbox/agent — Claude Agent SDK tools whose side effects go through the outbox.
 * Needs the optional peers `@anthropic-ai/claude-agent-sdk` and `zod` (4).
 *
 * What every framework adapter shares (definition types, call approvals, transaction runners)
 * comes from framework-neutral.ts, as in the other adapters; below is what is the Claude Agent
 * SDK's own.
 * @packageDocumentation
 */
export * from './framework-neutral.js';
export { effectStatusTool } from './effect-status-tool.js';
export {
  idempotencyKeyFor,
  idempotencyKeyHook,
  type IdempotencyKeyHookOptions,
} from './idempotency-key-hook.js';
export { connectInMemory, type InMemoryToolClient } from './in-memory-client.js';
export { outboxTool, type OutboxToolOptions } from './outbox-tool.js';
export { createToolServer, type ToolServerOptions } from './tool-server.js';
export {
  outboxApprovalHook,
  outboxCanUseTool,
  type OutboxCanUseToolOptions,
  type OutboxPermissionOptions,
} from './call-permission.js';
export { newTraceContext, parseTraceparent, type TraceContext } from './trace-context.js';
