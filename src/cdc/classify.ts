/** Re-check of a candidate not visible yet (see classifyCandidates). */
const MISSING_RECHECK_MS = 2;
/** A candidate invisible this long was deleted after its commit (retention, manual cleanup). */
const MISSING_FOR_GOOD_MS = 10_000;

/** One row of `candidateStatesSql` (sql/cdc.ts). */
export interface CandidateState {
  id: string;
  state: 'gone' | 'done' | 'deferred' | 'leased' | 'blocked';
  /**
   * For a deferred row: in how many ms what it waits for falls due (its own time or its head's),
   * measured on the server's clock by the statement that read the state; null when nothing is
   * due in time (a dead-lettered head, a held message). The driver may hand it over as a string.
   */
  dueInMs: number | string | null;
}

/** What classifying reads and changes: the dispatcher's candidate set and WAL position tracker. */
export interface ClassifyTarget {
  candidates: Set<string>;
  /** Marks a row as recorded in the table, so its transaction's position may be confirmed. */
  resolve(rowId: string): void;
  /** Candidates the state query did not find, since when. */
  missingSince: Map<string, number>;
}

/** What {@link classifyCandidates} found out. */
export interface Classification {
  /** Look at the remaining candidates again in this many ms (leased, blocked, not visible yet). */
  recheckInMs: number | undefined;
  /**
   * The earliest due time among the deferred rows (their own or their heads'), in ms from now,
   * if within `maxHoldMs`: the dispatcher claims again then.
   */
  dueInMs: number | undefined;
  /** Rows found deferred (resolved and dropped from the candidates). */
  deferred: number;
}

/**
 * Applies the states of candidates the last cycle did not finish: rows done or deleted leave the
 * candidates; rows deferred (not due, or behind a head that is not due or is dead-lettered) are
 * resolved — the table records their fate — and leave the candidates too: claiming them once due
 * is the claim's business, not the WAL's, and the dispatcher wakes at `dueInMs` for it (beyond
 * `maxHoldMs` the sweeper takes them). Leased or blocked rows stay, unresolved, and are looked at
 * again after `recheckMs`.
 */
export function classifyCandidates(
  rows: readonly CandidateState[],
  target: ClassifyTarget,
  options: { now: number; recheckMs: number; maxHoldMs: number },
): Classification {
  const { now, recheckMs, maxHoldMs } = options;
  const result: Classification = { recheckInMs: undefined, dueInMs: undefined, deferred: 0 };
  const recheck = (ms: number) => (result.recheckInMs = Math.min(result.recheckInMs ?? ms, ms));
  for (const row of rows) {
    if (row.state === 'gone' && !goneForGood(target.missingSince, row.id, now)) {
      // The walsender sends a commit as soon as it is flushed, and the committing backend makes
      // it visible a moment later: "not found" right after the WAL said "inserted" means "not
      // visible yet". Look again very soon; only a row missing for long was really deleted.
      recheck(MISSING_RECHECK_MS);
      continue;
    }
    target.missingSince.delete(row.id);
    if (row.state === 'leased' || row.state === 'blocked') {
      recheck(recheckMs);
      continue;
    }
    target.candidates.delete(row.id);
    target.resolve(row.id);
    if (row.state !== 'deferred') continue;
    result.deferred++;
    const dueInMs = row.dueInMs === null ? NaN : Number(row.dueInMs);
    if (dueInMs > 0 && dueInMs <= maxHoldMs)
      result.dueInMs = Math.min(result.dueInMs ?? dueInMs, dueInMs);
  }
  return result;
}

function goneForGood(missingSince: Map<string, number>, rowId: string, now: number): boolean {
  const since = missingSince.get(rowId);
  if (since === undefined) missingSince.set(rowId, now);
  return since !== undefined && now - since > MISSING_FOR_GOOD_MS;
}
