import { log, median, round } from './measure.js';

/**
 * A store's `dispatch_vs_raw_sql` (bench/cases/sqlite.ts, mysql.ts): `rounds` back-to-back pairs
 * of drains, ours and the raw loop's, unordered and then ordered, the side that goes first
 * alternating; the median of the pairs' ratios. On a shared machine a best-of-rounds ratio
 * compares the luckiest run of each side, which may be minutes apart; a pair runs within
 * seconds. `rate` drains `count` fresh messages and returns rows/s; `n` is its call number.
 */
export async function pairedDrains(
  store: string,
  count: number,
  rounds: number,
  rate: (who: 'raw' | 'ours', ordered: boolean, n: number) => Promise<number>,
) {
  const pairs = { unordered: [] as number[][], ordered: [] as number[][] };
  let n = 0;
  for (let r = 0; r < rounds; r++)
    for (const ordered of [false, true]) {
      const first = r % 2 === 0 ? 'raw' : 'ours';
      const a = await rate(first, ordered, n++);
      const b = await rate(first === 'raw' ? 'ours' : 'raw', ordered, n++);
      (ordered ? pairs.ordered : pairs.unordered).push(first === 'raw' ? [a, b] : [b, a]);
    }
  const summary = (list: number[][]) => ({
    ratio: round(median(list.map(([raw, ours]) => ours! / raw!)), 3),
    raw: Math.round(median(list.map(([raw]) => raw!))),
    ours: Math.round(median(list.map(([, ours]) => ours!))),
    pairRatios: list.map(([raw, ours]) => round(ours! / raw!, 3)),
  });
  const unordered = summary(pairs.unordered);
  const ordered = summary(pairs.ordered);
  log(
    `${store} dispatch rows/s (medians of ${rounds} pairs): raw ${unordered.raw}, ours ${unordered.ours}, ratio ${unordered.ratio} (unordered); raw ${ordered.raw}, ours ${ordered.ours}, ratio ${ordered.ratio} (ordered, 500 aggregates)`,
  );
  return {
    ratio: unordered.ratio,
    orderedRatio: ordered.ratio,
    rowsPerSecond: {
      raw: unordered.raw,
      ours: unordered.ours,
      rawOrdered: ordered.raw,
      oursOrdered: ordered.ours,
    },
    pairRatios: { unordered: unordered.pairRatios, ordered: ordered.pairRatios },
    count,
    rounds,
  };
}
