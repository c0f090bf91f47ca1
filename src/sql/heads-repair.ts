/**
 * Whether a starting dispatcher should repair heads (claim.ts `repairHeadsSql`): only while a
 * dispatcher older than migration 009 could still be running, i.e. for seven days after the
 * schema was UPGRADED across 009 — applied later than migration 001, not with it as on a new
 * install, where no older dispatcher ever ran. After that, run `repairHeads` by hand if older
 * dispatchers kept running.
 *
 * Why not always, as before (issue 25): the repair is a skip scan over every aggregate's chain in
 * `outbox_chain_idx`, one probe per aggregate with pending messages on a quiet database, but under
 * a snapshot held open it walks the dead entry of every message dispatched since: 502 ms at each
 * dispatcher start after 1,000,000 dispatched (bench/cases/held-snapshot.ts's shape), most of
 * what a fresh dispatcher's drain of 20,000 then took beyond the same drain without the snapshot.
 * Two small primary-key reads instead.
 */
export const headsRepairNeededSql = (schema: string) => `
SELECT EXISTS (
  SELECT 1
  FROM ${schema}.outbox_migrations m9
  JOIN ${schema}.outbox_migrations m1 ON m1.version = 1
  WHERE m9.version = 9
    AND m9.applied_at > m1.applied_at + interval '1 minute'
    AND m9.applied_at > now() - interval '7 days'
) AS needed`;
