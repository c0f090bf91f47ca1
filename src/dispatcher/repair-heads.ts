import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import { repairHeadsSql } from '../sql/claim.js';
import { resetLaneFloorSql } from '../sql/lane.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/**
 * Marks each aggregate's first pending ordered message as ready to claim, and returns how many
 * needed it (sql/claim.ts `repairHeadsSql`). Dispatchers run it when they start; run it yourself
 * after a rolling upgrade across migration 009 if dispatchers of the older version kept running
 * after the migration. Costs one index probe per aggregate with pending messages.
 *
 * It also puts the claims' lane floor back to the start (sql/lane.ts), so that a server clock
 * that stepped back costs one longer claim after a restart, never a message left below the floor.
 */
export async function repairHeads(
  executor: SqlExecutor,
  options: { schema?: string } = {},
): Promise<number> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const { rows } = await executor.query<{ id: string }>(repairHeadsSql(schema));
  await executor.query(resetLaneFloorSql(schema));
  return rows.length;
}
