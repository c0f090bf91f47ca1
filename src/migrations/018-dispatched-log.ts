import { dispatchedLogDdl018 } from './018-frozen-log.js';
import { settleAdvanceFunction018 } from './018-frozen-settle.js';
import type { Migration } from './migration.js';

/**
 * Published messages leave the outbox at their settle, for a ring of append-only tables that
 * retention empties with TRUNCATE (sql/dispatched-log.ts, issue 25): per message, one delete
 * record and one append instead of a non-HOT update and a retention delete with its full-page
 * images later.
 *
 * Rolling upgrade: a dispatcher of an earlier version calls the same function, re-created here,
 * so once this migration commits every settle writes the ring, old process or new. Rows
 * dispatched before stay in `outbox` with their `dispatched_at`; readers see both through the
 * view `outbox_messages`, and retention deletes the old ones by rows as before until none is
 * left. Nothing is rewritten: new tables, a view and a function.
 */
export const dispatchedLog: Migration = {
  version: 18,
  name: 'dispatched-log',
  up: (s) => [...dispatchedLogDdl018(s), settleAdvanceFunction018(s)],
};
