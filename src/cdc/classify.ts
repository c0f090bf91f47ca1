/** Re-check of a candidate not visible yet (see classifyCandidates). */
const MISSING_RECHECK_MS = 2;
/** A candidate invisible this long was deleted after its commit (retention, manual cleanup). */
const MISSING_FOR_GOOD_MS = 10_000;

/** One row of `candidateStatesSql` (sql/cdc.ts). */
export interface CandidateState {
  id: string;
  state: 'gone' | 'done' | 'deferred' | 'leased' | 'blocked';
  availableAtMs: number | null;
}

/** What classifying reads and changes: the dispatcher's candidate set and WAL position tracker. */
export interface ClassifyTarget {
  candidates: Set<string>;
  /** Marks a row as recorded in the table, so its transaction's position may be confirmed. */
  resolve(rowId: string): void;
  /** Candidates the state query did not find, since when. */
  missingSince: Map<string, number>;
}

/**
 * Applies the states of the candidates the last cycle could not publish: rows done or deleted
 * leave the candidates; rows deferred (backoff, or behind a deferred head) are resolved — the
 * table records them — and stay candidates until due, unless due later than `maxHoldMs` (then
 * the sweeper takes them); leased or blocked rows are looked at again after `recheckMs`.
 * Returns when to look again, or undefined when nothing needs a look.
 */
export function classifyCandidates(
  rows: readonly CandidateState[],
  target: ClassifyTarget,
  options: { now: number; recheckMs: number; maxHoldMs: number },
): number | undefined {
  const { now, recheckMs, maxHoldMs } = options;
  let next: number | undefined;
  const later = (ms: number) => (next = Math.min(next ?? Infinity, Math.max(ms, 1)));
  for (const row of rows) {
    if (row.state === 'gone' && !goneForGood(target.missingSince, row.id, now)) {
      // The walsender sends a commit as soon as it is flushed, and the committing backend makes
      // it visible a moment later: "not found" right after the WAL said "inserted" means "not
      // visible yet". Look again very soon; only a row missing for long was really deleted.
      later(MISSING_RECHECK_MS);
    } else if (row.state === 'done' || row.state === 'gone') {
      target.missingSince.delete(row.id);
      target.candidates.delete(row.id);
      target.resolve(row.id);
    } else if (row.state === 'deferred') {
      target.missingSince.delete(row.id);
      target.resolve(row.id);
      const dueInMs = Number(row.availableAtMs ?? now) - now;
      if (dueInMs > maxHoldMs)
        target.candidates.delete(row.id); // the sweeper's now
      else later(dueInMs > 0 ? dueInMs : recheckMs);
    } else {
      target.missingSince.delete(row.id);
      later(recheckMs);
    }
  }
  return next;
}

function goneForGood(missingSince: Map<string, number>, rowId: string, now: number): boolean {
  const since = missingSince.get(rowId);
  if (since === undefined) missingSince.set(rowId, now);
  return since !== undefined && now - since > MISSING_FOR_GOOD_MS;
}
