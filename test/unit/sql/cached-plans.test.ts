import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { cachedPlans } from '../../../src/migrations/011-cached-plans.js';

/**
 * Migration 011 builds `outbox_claim` and `outbox_settle_advance` from sql/claim.ts and
 * sql/settle.ts. A released migration must keep producing what it produced (databases migrated
 * earlier have those functions), so a change to either statement has to come with a new
 * migration that re-creates its function — this pin fails first, and says so. After adding that
 * migration, freeze the released text into 011 (copy it there as a literal) and update the hash.
 */
describe('migration 011 (outbox_claim, outbox_settle_advance)', () => {
  it('still creates the functions it was released with', () => {
    const statements = cachedPlans.up('"public"');
    expect(statements).toHaveLength(2);
    const digest = createHash('sha256').update(statements.join('\n;\n')).digest('hex');
    expect(
      digest,
      'sql/claim.ts or sql/settle.ts changed a function of migration 011: add a migration that re-creates it (CREATE OR REPLACE FUNCTION), freeze the released text into 011, then update this hash',
    ).toBe('ac3afbfe7e366166541bb08dc50c9a2540694888fe172cb25a4b851ca11b297e');
  });
});
