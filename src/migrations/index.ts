import { initial } from './001-initial.js';
import { toolCalls } from './002-tool-calls.js';
import { consumerPositions } from './003-consumer-positions.js';
import { shadow } from './004-shadow.js';
import { wakeWaiters } from './005-wake-waiters.js';
import { archive } from './006-archive.js';
import { timeOrderedIds } from './007-time-ordered-ids.js';
import { hotClaims } from './008-hot-claims.js';
import { orderedChains } from './009-ordered-chains.js';
import { approvals } from './010-approvals.js';
import { cachedPlans } from './011-cached-plans.js';
import { laneFloor } from './012-lane-floor.js';
import { dedupeKeys } from './013-dedupe-keys.js';
import { destinationLimits } from './014-destination-limits.js';
import { counterFillfactor } from './015-counter-fillfactor.js';
import { tenantFairClaims } from './016-tenant-fair-claims.js';
import { archiveDedupeKeys } from './017-archive-dedupe-keys.js';
import { dispatchedLog } from './018-dispatched-log.js';
import { runsFirstClaims } from './019-runs-first-claims.js';
import { advisorySettleGuard } from './020-advisory-settle-guard.js';
import { batchedLog } from './021-batched-log.js';
import { callApprovals } from './022-call-approvals.js';
import { claimFillfactor } from './023-claim-fillfactor.js';
import { lanes } from './024-lanes.js';
import { laneDeferrals } from './025-lane-deferrals.js';
import { laneWriterFeatures } from './026-lane-writer-features.js';
import { laneApprovals } from './027-lane-approvals.js';
import { laneTenantShares } from './028-lane-tenant-shares.js';
import { laneByIds } from './029-lane-by-ids.js';
import { laneSqlEnqueueAndSkip } from './030-lane-sql-enqueue-and-skip.js';
import { laneReadSnapshot } from './031-lane-read-snapshot.js';
import { laneMessageIdIndex } from './032-lane-message-id-index.js';
import { laneArchive } from './033-lane-archive.js';
import { lanePruneWalCompression } from './034-lane-prune-wal-compression.js';
import { rateLimitQueue } from './035-rate-limit-queue.js';
import { engineRecord } from './036-engine-record.js';
import { laneParkedProbe } from './037-lane-parked-probe.js';
import type { Migration } from './migration.js';

/** Every migration, in order. Append only. */
export const MIGRATIONS: readonly Migration[] = [
  initial,
  toolCalls,
  consumerPositions,
  shadow,
  wakeWaiters,
  archive,
  timeOrderedIds,
  hotClaims,
  orderedChains,
  approvals,
  cachedPlans,
  laneFloor,
  dedupeKeys,
  destinationLimits,
  counterFillfactor,
  tenantFairClaims,
  archiveDedupeKeys,
  dispatchedLog,
  runsFirstClaims,
  advisorySettleGuard,
  batchedLog,
  callApprovals,
  claimFillfactor,
  lanes,
  laneDeferrals,
  laneWriterFeatures,
  laneApprovals,
  laneTenantShares,
  laneByIds,
  laneSqlEnqueueAndSkip,
  laneReadSnapshot,
  laneMessageIdIndex,
  laneArchive,
  lanePruneWalCompression,
  rateLimitQueue,
  engineRecord,
  laneParkedProbe,
];

/** The schema version this build of agent-outbox expects. */
export const LATEST_VERSION = MIGRATIONS[MIGRATIONS.length - 1]?.version ?? 0;
