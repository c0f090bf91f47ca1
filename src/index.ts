/**
 * agent-outbox — the stable public API. Anything not exported here is internal.
 * @packageDocumentation
 */
export {
  OutboxDuplicateError,
  OutboxAutocommitError,
  OutboxError,
  OutboxPoolerError,
  OutboxSchemaError,
  OutboxValidationError,
} from './core/errors.js';
export { DEFAULT_SCHEMA, quoteIdentifier } from './core/identifier.js';
export {
  HEADER,
  type EnqueuedMessage,
  type JsonValue,
  type OutboxMessage,
} from './core/message.js';
export {
  DEFAULT_LIMITS,
  validateMessage,
  validateMessages,
  type ValidationLimits,
} from './core/validate.js';
export {
  fromDrizzle,
  type DrizzleQueryable,
  type DrizzleSession,
  type DrizzleTransactional,
  type FromDrizzleOptions,
} from './store/from-drizzle.js';
export { fromKysely, type KyselyCompiledQuery, type KyselyQueryable } from './store/from-kysely.js';
export { fromPg, type FromPgOptions, type PgQueryable } from './store/from-pg.js';
export { fromPglite, type PgliteQueryable } from './store/from-pglite.js';
export {
  fromPostgresJs,
  type PostgresJsQueryable,
  type PostgresJsTransactional,
} from './store/from-postgres-js.js';
export {
  fromPrisma,
  type PrismaQueryable,
  type PrismaTransactional,
  type PrismaTransactionOptions,
} from './store/from-prisma.js';
export type { QueryOptions, SqlExecutor } from './store/sql-executor.js';
export {
  createPgClient,
  createPgPool,
  type PgClientSettings,
  type PgPoolSettings,
} from './store/multi-host-pool.js';
export type { TargetSessionAttrs } from './store/multi-host-url.js';
export {
  createOutbox,
  type EnqueueOptions,
  type OutboxOptions,
  type OutboxWriter,
} from './writer/create-outbox.js';
export { LATEST_VERSION, MIGRATIONS } from './migrations/index.js';
export type { Migration } from './migrations/migration.js';
export {
  assertSchemaCurrent,
  migrate,
  schemaVersion,
  type MigrateOptions,
  type MigrateResult,
} from './migrations/migrate.js';
export {
  errorText,
  withMiddleware,
  type OutgoingMessage,
  type PublishOutcome,
  type Publisher,
  type PublisherMiddleware,
} from './publishers/publisher.js';
export {
  InMemoryPublisher,
  type FailureInjector,
} from './publishers/memory/in-memory-publisher.js';
export { EnvelopeError, parseEnvelope, toEnvelope, type Envelope } from './publishers/envelope.js';
export { backoffDelayMs, DEFAULT_BACKOFF, type BackoffOptions } from './core/backoff.js';
export { redactSecrets } from './core/redact.js';
export {
  createDispatcher,
  type Dispatcher,
  type DispatcherState,
  type DispatcherStats,
  type DrainResult,
} from './dispatcher/dispatcher.js';
export { createLaneDispatcher, type LaneDispatcherOptions } from './lanes/lane-dispatcher.js';
export {
  laneStatus,
  listLaneDeadLetters,
  replayLaneDeadLetters,
  skipLaneDeadLetters,
  type LaneDeadLetter,
  type LaneState,
  type LaneStatus,
} from './lanes/lane-admin.js';
export {
  LANE_STATUS_ID_WINDOW,
  readLaneEngineStatus,
  type LaneEngineStatus,
} from './lanes/lane-engine-status.js';
export {
  resolveDispatcherOptions,
  type ClaimShapeOption,
  type DeadLetterPolicy,
  type DispatcherOptions,
} from './dispatcher/options.js';
export type {
  ClaimRequest,
  OutboxStore,
  SettleRequest,
  SettleResult,
  Settlement,
} from './dispatcher/outbox-store.js';
export {
  addUnorderedTopics,
  listUnorderedTopics,
  removeUnorderedTopics,
} from './dispatcher/unordered-topics.js';
export { repairHeads } from './dispatcher/repair-heads.js';
export {
  declareRateLimits,
  listRateLimits,
  removeRateLimits,
  type RateLimit,
  type RateLimitState,
} from './dispatcher/rate-limits.js';
export type { RoutePauseOptions } from './dispatcher/destination-limits.js';
export {
  publishInOrder,
  type MessageFate,
  type OrderedPublishOptions,
} from './dispatcher/ordered-publish.js';
export { PgOutboxStore, type PgOutboxStoreOptions } from './dispatcher/pg-outbox-store.js';
export type { CommitMode } from './sql/commit-mode.js';
export type { DispatcherEventMap } from './dispatcher/events.js';
export { globMatches, globToLike } from './dispatcher/topic-patterns.js';
export { planSettlement } from './dispatcher/settle-plan.js';
export {
  readShadowComparison,
  readStatus,
  type OutboxStatus,
  type ShadowComparison,
} from './admin/status.js';
export {
  readDatabaseEngine,
  setDatabaseEngine,
  type EngineChange,
} from './admin/database-engine.js';
export type { Engine } from './core/engine.js';
export {
  listDeadLetters,
  replayDeadLetters,
  type DeadLetter,
  type ReplaySelection,
} from './admin/dead-letters.js';
export {
  approveMessages,
  expireApprovals,
  listAwaitingApproval,
  OutboxApprovalError,
  rejectMessages,
  type ApprovalEngine,
  type ApprovalState,
  type ApproveOptions,
  type AwaitingApproval,
  type DecidedMessage,
  type DecisionProblem,
  type RejectOptions,
} from './admin/approvals.js';
export {
  callApprovalsOf,
  decideCallApproval,
  expireCallApprovals,
  getCallApproval,
  isCallApprovalRef,
  listCallApprovals,
  watchCallApprovals,
  type CallApproval,
  type CallApprovalState,
  type CallApprovalWatcher,
  type CallDecision,
  type DecideCallOptions,
  type WatchCallApprovalsOptions,
} from './admin/call-approvals.js';
export {
  approvalLink,
  ApprovalTokenError,
  verifyApprovalToken,
  type ApprovalLinkOptions,
  type ApprovalToken,
} from './core/approval-links.js';
export {
  createApprovalHandler,
  type ApprovalHandler,
  type ApprovalHandlerOptions,
} from './admin/approval-handler.js';
export {
  readEffectStatus,
  type EffectState,
  type EffectStatus,
  type EffectStatusQuery,
} from './admin/effect-status.js';
export type { WakeSource } from './dispatcher/wake-source.js';
export {
  createRetentionJob,
  DEFAULT_OUTBOX_RETENTION_MS,
  poolSessions,
  previewPrune,
  pruneOutbox,
  type PruneOutboxOptions,
  type PruneOutboxResult,
  type PrunePreview,
  type PruneProgress,
  type RetentionEventMap,
  type RetentionJob,
  type RetentionJobOptions,
  type RetentionRunResult,
  type RetentionSession,
} from './retention/index.js';
export {
  backfill,
  BACKFILL_HEADER,
  type BackfillOptions,
  type BackfillProgress,
  type BackfillResult,
} from './retrofit/index.js';
export { createPublisherFromUrl, type PublisherFromUrlOptions } from './publishers/from-url.js';
export {
  createPublisherFromConfig,
  loadPublisherConfig,
  type PublisherConfig,
} from './publishers/publisher-config.js';
export { Router } from './publishers/router.js';
export type { PublishOptions } from './publishers/publisher.js';
export {
  createListenNotifyWakeSource,
  type ListenClient,
  type ListenNotifyEventMap,
  type ListenNotifyOptions,
  type ListenNotifyWakeSource,
} from './dispatcher/wake/listen-notify.js';
export {
  probeListen,
  type ListenProbeOptions,
  type ListenProbeResult,
} from './dispatcher/wake/listen-probe.js';
export {
  DEFAULT_RECONNECT_DELAY,
  reconnectDelayMs,
  type ReconnectDelayOptions,
} from './dispatcher/wake/reconnect-delay.js';
