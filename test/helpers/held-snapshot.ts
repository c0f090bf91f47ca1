import pg from 'pg';
import type { Publisher } from '../../src/index.js';
import type { PlanNode } from './explain.js';

/**
 * A REPEATABLE READ snapshot held open on its own connection (issue 25: a report, `pg_dump`, a
 * standby's feedback): taken before anything is written, it keeps every row version that dies
 * after it from vacuum. `release()` ends it and closes the connection.
 */
export async function holdSnapshot(url: string): Promise<{ release(): Promise<void> }> {
  const holder = new pg.Client({ connectionString: url });
  await holder.connect();
  await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
  await holder.query('SELECT count(*) FROM outbox');
  return {
    async release() {
      await holder.query('ROLLBACK').catch(() => undefined);
      await holder.end();
    },
  };
}

/** Shared buffers a plan touched (hit and read). */
export const blocksOf = (plan: PlanNode) =>
  (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0);

/** A publisher that publishes everything at once and does nothing. */
export const noopPublisher: Publisher = {
  publish: async (m) => m.map(() => ({ status: 'published' as const })),
};
