/**
 * Whether the next claim should take runs behind its ordered heads (`claimSql`), from what the
 * last claim returned: `claimed` rows, `ordered` of them ordered, `runMembers` of those behind a
 * head of the same claim. The runs' CTEs are a fifth of an unordered claim's CPU and a sixth of
 * an ordered one's; they take something only when the batch left after the heads gives each
 * ordered head a share (`(batch - heads) / orderedHeads >= 1`, claim.ts). So: runs while they
 * took something or would have room, and after a claim that found nothing; heads only
 * (`claimHeadsSql`: the same heads, the same head check) while there is no ordered message, or
 * while the heads alone leave no share. Either way the next claim finds out again, so a hot
 * aggregate waits at most one claim for its runs.
 *
 * Shared by the SQLite store and D1's (src/cloudflare/d1-outbox-store.ts), whose claims are the
 * same statements. Measured on the SQLite store (20,000 ordered messages, batch 200, five drains
 * each): on 500 aggregates, where the heads fill every batch, 190–210 ms with runs every claim,
 * 158–187 heads only; on 50 and on one aggregate the runs are the batch (heads only: 227–249
 * and 1,487–1,585 ms against 162–171 and 182–190), and this keeps them. On D1 (Miniflare, 200
 * heads; test/cloudflare/ordered-chains.test.ts prints it): 2,401 rows read with runs, 1,400
 * heads only.
 */
export function runsPayOff(
  batchSize: number,
  claimed: number,
  ordered: number,
  runMembers: number,
): boolean {
  // Nothing claimed says nothing about the next batch: runs, so that the first claim after an
  // idle spell takes a hot aggregate's run (a Durable Object's store lives across alarms).
  if (claimed === 0) return true;
  if (ordered === 0) return false;
  if (runMembers > 0) return true;
  const heads = claimed - runMembers;
  const orderedHeads = ordered - runMembers;
  return batchSize - heads >= orderedHeads;
}

/** {@link runsPayOff} from the messages a claim returned (`ordered: false` marks unordered ones). */
export function runsPayOffAfter(
  batchSize: number,
  claimed: readonly { aggregateId: string; ordered?: boolean }[],
): boolean {
  let ordered = 0;
  const aggregates = new Set<string>();
  for (const message of claimed)
    if (message.ordered !== false) {
      ordered++;
      aggregates.add(message.aggregateId);
    }
  return runsPayOff(batchSize, claimed.length, ordered, ordered - aggregates.size);
}
