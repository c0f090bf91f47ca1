import { OutboxValidationError } from '../core/errors.js';
import type { DispatcherOptions } from '../dispatcher/options.js';

/**
 * The polling dispatcher's options a store other than Postgres (SQLite, MySQL) takes. Not
 * here, because those stores have no way to do them: a wake source on LISTEN/NOTIFY (polling is
 * how their dispatchers hear of new messages), rate limits and route pauses shared between
 * dispatchers, claim shapes.
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
  | 'asyncSettle'
>;

/** Throws unless every unordered topic pattern is a string of 1-255 characters. */
export function checkUnorderedTopics(globs: readonly unknown[]): void {
  for (const glob of globs)
    if (typeof glob !== 'string' || glob.length === 0 || glob.length > 255)
      throw new OutboxValidationError(
        'unorderedTopics',
        'a topic pattern must be 1-255 characters',
      );
}
