/**
 * The most of `at` (times in ms, sorted ascending) that fall in any window of `ms`, among windows
 * starting at or after `from`: how many deliveries the busiest stretch of a run carried (rate
 * limits, issue 43; bench/cases/rate-limit-windows.ts uses it too).
 */
export function busiestWindow(at: readonly number[], ms: number, from = -Infinity): number {
  return busiestWindowAt(at, ms, from).count;
}

/** {@link busiestWindow}, with when the busiest window starts (`start`, one of `at`). */
export function busiestWindowAt(
  at: readonly number[],
  ms: number,
  from = -Infinity,
): { count: number; start: number } {
  let best = { count: 0, start: NaN };
  for (let i = 0, j = 0; i < at.length; i++) {
    if (at[i]! < from) continue;
    j = Math.max(j, i);
    while (j < at.length && at[j]! - at[i]! < ms) j++;
    if (j - i > best.count) best = { count: j - i, start: at[i]! };
  }
  return best;
}
