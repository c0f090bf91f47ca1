import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import { repairHeadsSql } from '../sql/claim.js';
import { headsRepairNeededSql } from '../sql/heads-repair.js';
import { resetLaneFloorSql } from '../sql/lane.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/**
 * Marks each aggregate's first pending ordered message as ready to claim, and returns how many
 * needed it (sql/claim.ts `repairHeadsSql`). Dispatchers run it when they start during the seven
 * days after an upgrade across migration 009 (sql/heads-repair.ts); run it yourself after a
 * rolling upgrade across migration 009 if dispatchers of the older version kept running longer.
 * Costs one index probe per aggregate with pending messages (under a snapshot held open, also
 * one per message dispatched since).
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

/**
 * What a dispatcher runs before its first claim: the lane floor put back (as {@link repairHeads}
 * does), and the heads repaired only while a dispatcher older than migration 009 could still be
 * running (sql/heads-repair.ts). Returns how many heads needed the repair (0 when it was skipped).
 */
export async function prepareClaims(
  executor: SqlExecutor,
  options: { schema?: string } = {},
): Promise<number> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const { rows } = await executor.query<{ needed: boolean }>(headsRepairNeededSql(schema));
  if (rows[0]?.needed) return repairHeads(executor, options);
  await executor.query(resetLaneFloorSql(schema));
  return 0;
}
