/**
 * The most of `at` (times in ms, sorted ascending) that fall in any window of `ms`, among windows
 * starting at or after `from`: how many deliveries the busiest stretch of a run carried (rate
 * limits, issue 43; bench/cases/rate-limit-windows.ts uses it too).
 */
export function busiestWindow(at: readonly number[], ms: number, from = -Infinity): number {
  let most = 0;
  for (let i = 0, j = 0; i < at.length; i++) {
    if (at[i]! < from) continue;
    j = Math.max(j, i);
    while (j < at.length && at[j]! - at[i]! < ms) j++;
    most = Math.max(most, j - i);
  }
  return most;
}
