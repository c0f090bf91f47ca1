/** Counters since the dispatcher was created. */
export interface DispatcherStats {
  batches: number;
  claimed: number;
  published: number;
  retried: number;
  deadLettered: number;
  /** Shadow messages settled without publishing. */
  shadowed: number;
  /**
   * Messages of ordered runs given back unpublished, behind a failure in their run (or out of
   * time): released without an attempt counted.
   */
  released: number;
  /**
   * Settles put off because a writer of the aggregate was mid-transaction (sql/settle.ts); each
   * is retried shortly until it goes through.
   */
  deferred: number;
  /**
   * Messages given back without an attempt to wait for their route (issue 27): paused, probing,
   * over its rate limit, or failed only because the destination was down.
   */
  postponed: number;
  /** Settlements refused because the lease had passed to another claim (fencing). */
  fenced: number;
  claimFailures: number;
  settleFailures: number;
}

/** All counters at zero: a new dispatcher's. */
export function emptyStats(): DispatcherStats {
  return {
    batches: 0,
    claimed: 0,
    published: 0,
    retried: 0,
    deadLettered: 0,
    shadowed: 0,
    released: 0,
    deferred: 0,
    postponed: 0,
    fenced: 0,
    claimFailures: 0,
    settleFailures: 0,
  };
}

/** What each counter gained from `before` to `after` (what one `drain()` did). */
export function statsSince(before: DispatcherStats, after: DispatcherStats): DispatcherStats {
  return Object.fromEntries(
    Object.entries(after).map(([k, v]) => [k, v - before[k as keyof DispatcherStats]]),
  ) as unknown as DispatcherStats;
}
