import { rateLimitQueueSql } from '../sql/rate-limits.js';
import type { Migration } from './migration.js';

/**
 * `outbox_rate_limits.queued_until`: the slots handed out to messages a bucket refused, shared
 * by every dispatcher (sql/rate-limits.ts `takeTokensSql` says why). A dispatcher of an earlier
 * version ignores the column and places its refused messages as before.
 */
export const rateLimitQueue: Migration = {
  version: 35,
  name: 'rate-limit-queue',
  up: (s) => [rateLimitQueueSql(s)],
};
