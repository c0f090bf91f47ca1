/**
 * The bench's command line (see main.ts): `--quick` for smaller counts with the same keys, `--only
 * held_snapshot,wal` for just those cases. Anything else is ignored.
 */

/** Counts of a `--quick` run: about two minutes here. */
const QUICK = {
  enqueueTx: 500,
  notifySeconds: 2,
  dispatchRows: 20_000,
  rounds: 1,
  latencySeconds: 3,
  historyRows: 500_000,
  historyPending: 20_000,
  historyRounds: 2,
  memorySeconds: 3,
  peerJobs: 10_000,
  peerRounds: 1,
  latencyRounds: 1,
  hotMessages: 5_000,
  hotRounds: 1,
  deepMessages: 40_000,
  deepRounds: 1,
  blockedDepth: 20_000,
  blockedSamples: 100,
  idleAggregates: 100_000,
  idleRounds: 1,
  heldHistory: 100_000,
  heldSamples: 50,
  heldBacklog: 20_000,
  heldPeerHistory: 20_000,
  walMessages: 2_000,
};

/** Counts of a full run: about fourteen minutes here (5,000,000 history rows). */
const FULL: typeof QUICK = {
  enqueueTx: 2_000,
  notifySeconds: 5,
  dispatchRows: 50_000,
  rounds: 2,
  latencySeconds: 10,
  historyRows: 5_000_000,
  historyPending: 50_000,
  historyRounds: 3,
  memorySeconds: 6,
  peerJobs: 50_000,
  peerRounds: 2,
  latencyRounds: 3,
  hotMessages: 20_000,
  hotRounds: 3,
  deepMessages: 200_000,
  deepRounds: 2,
  blockedDepth: 100_000,
  blockedSamples: 300,
  idleAggregates: 1_000_000,
  idleRounds: 3,
  heldHistory: 1_000_000,
  heldSamples: 100,
  heldBacklog: 20_000,
  heldPeerHistory: 100_000,
  walMessages: 5_000,
};

/** The counts each case runs with. */
export type BenchSize = typeof QUICK;

/** What the command line asks for. */
export interface BenchArgs {
  quick: boolean;
  /** `--only held_snapshot,wal`: run just those cases (issue 25's), print and write their keys. */
  only: Set<string> | null;
  size: BenchSize;
}

export function parseBenchArgs(argv: readonly string[] = process.argv): BenchArgs {
  const quick = argv.includes('--quick');
  const onlyIndex = argv.indexOf('--only');
  const only = onlyIndex >= 0 ? new Set((argv[onlyIndex + 1] ?? '').split(',')) : null;
  return { quick, only, size: quick ? QUICK : FULL };
}
