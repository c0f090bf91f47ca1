/**
 * `agent-outbox/mysql`: the outbox on MySQL 8 or MariaDB 10.6+, for teams whose business
 * database is one of them. mysql2 3.x is an optional peer dependency (`npm install mysql2`).
 * See docs/mysql.md for what it cannot do and what differs on MySQL 8.
 */
export { openMysql, type OpenMysqlOptions } from './open-mysql.js';
export type {
  MysqlPool,
  MysqlPoolConnection,
  MysqlQueryable,
  MysqlResultHeader,
} from './mysql-connection.js';
export { isMysqlUrl, redactMysqlUrl } from './mysql-url.js';
export {
  migrateMysql,
  assertMysqlSchemaCurrent,
  type MysqlMigrateResult,
} from './migrate-mysql.js';
export {
  createMysqlOutbox,
  type MysqlOutboxOptions,
  type MysqlOutboxWriter,
  type MysqlEnqueueOptions,
} from './mysql-writer.js';
export { MysqlOutboxStore } from './mysql-outbox-store.js';
export { fromKyselyMysql } from './from-kysely-mysql.js';
export { fromDrizzleMysql, type DrizzleMysqlQueryable } from './from-drizzle-mysql.js';
export { fromPrismaMysql, type PrismaMysqlQueryable } from './from-prisma-mysql.js';
export { createMysqlDispatcher, type MysqlDispatcherOptions } from './mysql-dispatcher.js';
export { readMysqlStatus, listMysqlDeadLetters, replayMysqlDeadLetters } from './mysql-admin.js';
export { pruneMysqlOutbox, type PruneMysqlOptions } from './mysql-retention.js';
export {
  createMysqlLedger,
  createMysqlLedgerTables,
  mysqlTransactions,
  type MysqlLedgerConnection,
  type MysqlLedgerPool,
} from './mysql-ledger.js';
export type { Dispatcher, DispatcherState, DrainResult } from '../../dispatcher/dispatcher.js';
export type { OutboxStatus } from '../../admin/status.js';
export type { DeadLetter, ReplaySelection } from '../../admin/dead-letters.js';
export type { EnqueuedMessage, OutboxMessage } from '../../core/message.js';
export {
  OutboxAutocommitError,
  OutboxValidationError,
  OutboxSchemaError,
} from '../../core/errors.js';
