/**
 * The tenant shares of an `outbox_lane_next` call (migration 028, sql/lane-tenant-shares.ts), as
 * the lane dispatcher takes them: after the marker `lane = -2` come the shares' messages and each
 * visited lane's tenant cursor (`message_id` NULL, `topic` the last tenant visited).
 */

/** The columns of a row this module looks at. */
interface ShareRow {
  lane: number;
  id: string;
  message_id: string | null;
  topic: string | null;
  share?: boolean;
}

const SHARES_MARKER = -2;

/**
 * The call's rows with its shares taken apart: the lane reads' rows as they came, then the
 * shares' messages (`share: true`) that the reads did not return already — above how far the
 * call read their lane (its marker, else its last row) and above `positions` (where the call
 * started each lane). The tenant cursors go into `tenantAfter`.
 */
export function withShares<R extends ShareRow>(
  rows: readonly R[],
  positions: ReadonlyMap<number, string>,
  tenantAfter: Map<number, string>,
): R[] {
  const marker = rows.findIndex((r) => r.lane === SHARES_MARKER && r.message_id === null);
  if (marker < 0) return [...rows];
  const read = rows.slice(0, marker);
  const reached = new Map<number, bigint>();
  for (const [lane, position] of positions) reached.set(lane, BigInt(position));
  for (const row of read) {
    const id = BigInt(row.id);
    if (id > (reached.get(row.lane) ?? -1n)) reached.set(row.lane, id);
  }
  for (const row of rows.slice(marker + 1)) {
    if (row.message_id === null) {
      if (row.topic !== null) tenantAfter.set(row.lane, row.topic);
      continue;
    }
    if (BigInt(row.id) <= (reached.get(row.lane) ?? -1n)) continue;
    read.push({ ...row, share: true });
  }
  return read;
}

/** The lane of the last row a lane read returned (not a share's), if any. */
export function lastRegularLane(rows: readonly ShareRow[]): number | undefined {
  for (let i = rows.length - 1; i >= 0; i--) if (!rows[i]!.share) return rows[i]!.lane;
  return undefined;
}
