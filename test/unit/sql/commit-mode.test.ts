import { describe, expect, it } from 'vitest';
import { ASYNC_COMMIT_PREDICATE, claimCommitClause } from '../../../src/sql/commit-mode.js';

/**
 * What a claim statement ends with per commit mode (the behaviour is tested on Postgres in
 * test/integration/dispatcher/commit-mode.test.ts and test/chaos/dispatcher-async-claim-crash.test.ts).
 */
describe('claimCommitClause', () => {
  it('adds nothing to a synchronous claim', () => {
    expect(claimCommitClause('sync')).toBe('');
  });

  it('makes an asynchronous claim skip the flush wait, and take nothing for a lease after a crash recovery', () => {
    const clause = claimCommitClause('async');
    expect(clause.trimStart().startsWith(`WHERE ${ASYNC_COMMIT_PREDICATE}`)).toBe(true);
    expect(clause).toContain(
      `coalesce(pg_stat_get_bgwriter_stat_reset_time(), '-infinity')\n      <= now() - $3::float8 * interval '1 millisecond'`,
    );
    expect(claimCommitClause('async', '$9')).toContain(`now() - $9 * interval`);
  });
});
