/**
 * Retention (SPEC §4.9): prune or archive dispatched outbox rows in bounded batches, and a
 * scheduled job with one runner per schema at a time.
 * @packageDocumentation
 */
export {
  DEFAULT_OUTBOX_RETENTION_MS,
  previewPrune,
  pruneOutbox,
  type PruneOutboxOptions,
  type PruneOutboxResult,
  type PruneProgress,
  type PrunePreview,
} from './prune-outbox.js';
export { pruneDedupeKeys, type PruneDedupeKeysResult } from './prune-dedupe-keys.js';
export {
  createRetentionJob,
  poolSessions,
  type PgSessionPool,
  type RetentionEventMap,
  type RetentionJob,
  type RetentionJobOptions,
  type RetentionRunResult,
  type RetentionSession,
} from './retention-job.js';
