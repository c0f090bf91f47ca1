/**
 * `agent-outbox/sqlite`: the outbox on a SQLite file, for agents that run on one machine — a
 * laptop, a desktop app, one small server. better-sqlite3 12 is an optional peer dependency
 * (`npm install better-sqlite3`). The SQL is the D1 variant's (src/sql/sqlite). See
 * docs/sqlite.md for what it cannot do.
 */
export {
  openSqlite,
  configureSqlite,
  type OpenSqliteOptions,
  type SqliteDriver,
} from './open-sqlite.js';
export type { SqliteDatabase, SqliteStatement, SqliteTransaction } from './sqlite-database.js';
export { isSqliteUrl, sqliteFilePath } from './sqlite-url.js';
export {
  migrateSqlite,
  assertSqliteSchemaCurrent,
  type SqliteMigrateResult,
} from './migrate-sqlite.js';
export {
  createSqliteOutbox,
  type SqliteOutboxOptions,
  type SqliteOutboxWriter,
  type SqliteEnqueueOptions,
} from './sqlite-writer.js';
export { SqliteOutboxStore } from './sqlite-outbox-store.js';
export type { DispatchSynchronous } from './sqlite-write-queue.js';
export { createSqliteDispatcher, type SqliteDispatcherOptions } from './sqlite-dispatcher.js';
export {
  readSqliteStatus,
  listSqliteDeadLetters,
  replaySqliteDeadLetters,
} from './sqlite-admin.js';
export { pruneSqliteOutbox, type PruneSqliteOptions } from './sqlite-retention.js';
export { createSqliteLedger, type SqliteLedgerOptions } from './sqlite-ledger.js';
export { fromSqlite } from './from-sqlite.js';
export type { Dispatcher, DispatcherState, DrainResult } from '../../dispatcher/dispatcher.js';
export type { OutboxStatus } from '../../admin/status.js';
export type { DeadLetter, ReplaySelection } from '../../admin/dead-letters.js';
export type { EnqueuedMessage, OutboxMessage } from '../../core/message.js';
export {
  OutboxAutocommitError,
  OutboxValidationError,
  OutboxSchemaError,
} from '../../core/errors.js';
