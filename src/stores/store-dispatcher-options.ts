import { OutboxValidationError } from '../core/errors.js';
import type { DispatcherOptions } from '../dispatcher/options.js';

/**
 * The polling dispatcher's options a store other than Postgres (SQLite, MySQL) takes. Not
 * here, because those stores have no way to do them: a wake source on LISTEN/NOTIFY (polling is
 * how their dispatchers hear of new messages), rate limits and route pauses shared between
 * dispatchers, claim shapes, and `asyncSettle` / `asyncClaim` (see {@link refuseAsyncSettle}).
 */
export type StoreDispatcherOptions = Pick<
  DispatcherOptions,
  | 'publisher'
  | 'batchSize'
  | 'leaseMs'
  | 'pollIntervalMs'
  | 'backoff'
  | 'maxAttempts'
  | 'unorderedTopics'
  | 'deadLetterPolicy'
  | 'concurrency'
  | 'wakeSource'
  | 'id'
>;

/**
 * Throws when `asyncSettle` or `asyncClaim` is given (untyped callers; the types leave them
 * out): those ask Postgres for a commit that does not wait for the WAL flush, which neither
 * store can do per transaction as asked. MySQL and MariaDB decide it for the whole server
 * (`innodb_flush_log_at_trx_commit`); the SQLite dispatcher already commits its own writes
 * without a flush (its `synchronous` option).
 */
export function refuseAsyncSettle(options: object): void {
  for (const name of ['asyncSettle', 'asyncClaim'])
    if ((options as Record<string, unknown>)[name] !== undefined)
      throw new OutboxValidationError(
        name,
        'is a Postgres option: on MySQL/MariaDB the flush of a commit is server-wide (innodb_flush_log_at_trx_commit); the SQLite dispatcher commits its own writes without a flush already (its synchronous option)',
      );
}

/** Throws unless every unordered topic pattern is a string of 1-255 characters. */
export function checkUnorderedTopics(globs: readonly unknown[]): void {
  for (const glob of globs)
    if (typeof glob !== 'string' || glob.length === 0 || glob.length > 255)
      throw new OutboxValidationError(
        'unorderedTopics',
        'a topic pattern must be 1-255 characters',
      );
}
