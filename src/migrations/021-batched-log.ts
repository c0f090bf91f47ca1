import { batchedLogDdl } from '../sql/dispatched-log.js';
import { settleAdvanceFunctionSql } from '../sql/settle.js';
import type { Migration } from './migration.js';

/**
 * The dispatched log in batches (sql/dispatched-log.ts, issue 25): a settle appends one
 * compressed row per run of ids it settled, not one row and two index entries per message —
 * about half the WAL a dispatch writes.
 *
 * Rolling upgrade: the settle function is re-created in place, so once this commits every settle
 * writes batches, old process or new; the retention function and the view `outbox_messages` are
 * re-created to read both kinds of table, so an earlier version's readers and prune keep
 * working (an earlier version's effect status reads batches through the view, without the
 * lookup functions' indexes, until it is upgraded). Rows dispatched before stay in the
 * per-message tables and are read from there until retention empties them. Nothing is
 * rewritten: a type, new tables, a view and functions.
 */
export const batchedLog: Migration = {
  version: 21,
  name: 'batched-log',
  up: (s) => [...batchedLogDdl(s), settleAdvanceFunctionSql(s)],
};
