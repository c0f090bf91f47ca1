import { insertTriggerFunctionSql } from '../sql/lane.js';
import { settleAdvanceFunction020 } from './020-frozen-settle.js';
import type { Migration } from './migration.js';

/**
 * The settle's guard in memory (issue 25, writes per message): a settle that leaves an aggregate
 * without pending ordered messages no longer locks and rewrites the aggregate's counter row. The
 * writer takes an advisory lock of its aggregate in the insert trigger (after its counter row,
 * before it decides whether its message is the head) and the settle tries the same lock before
 * its statement (settle.ts `settleGuardSql`). A settle called in a REPEATABLE READ or
 * SERIALIZABLE transaction keeps the counter-row guard, as does the rejection of a held message
 * (approvals.ts).
 *
 * Rolling upgrade: both functions are re-created in place, so every dispatcher, old or new, settles
 * through the new function and every writer inserts through the new trigger once this commits.
 * A writer still open from before would hold no advisory lock, and a settle after the commit
 * could then empty its aggregate behind its message's back; so the migration first takes the
 * outbox in SHARE mode, which waits for every transaction that wrote to it to end (and holds new
 * writes, claims and settles for the moment the two functions take to replace).
 * The counter-row guard (a dispatcher's settle in a REPEATABLE READ transaction, approvals) still
 * works beside it: writers still take their counter row first. A writer of an earlier version's
 * library needs nothing (the trigger is in the database).
 */
export const advisorySettleGuard: Migration = {
  version: 20,
  name: 'advisory-settle-guard',
  up: (s) => [
    `LOCK TABLE ${s}.outbox IN SHARE MODE`,
    insertTriggerFunctionSql(s),
    settleAdvanceFunction020(s),
  ],
};
