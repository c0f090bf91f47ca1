import { log, median, round, timed } from './measure.js';

/**
 * The enqueue-overhead figure of a store: ms per business transaction with our writer's two
 * messages (`order(true)`) over the same transaction without them (`order(false)`),
 * `transactions` each, alternated in blocks of 100 after a warm-up of 50; the median block of
 * each side. `label` names the store in the log line.
 */
export async function enqueueOverheadBlocks(
  label: string,
  transactions: number,
  order: (withOutbox: boolean) => unknown,
) {
  for (let i = 0; i < 50; i++) await order(i % 2 === 0); // warm-up
  const blocks = { with: [] as number[], without: [] as number[] };
  for (let done = 0; done < transactions; done += 100) {
    for (const side of ['without', 'with'] as const) {
      const ms = await timed(async () => {
        for (let i = 0; i < 100; i++) await order(side === 'with');
      });
      blocks[side].push(ms / 100);
    }
  }
  const withMs = median(blocks.with);
  const withoutMs = median(blocks.without);
  log(
    `${label} enqueue: ${withMs.toFixed(3)} ms/tx with the outbox, ${withoutMs.toFixed(3)} without`,
  );
  return {
    ratio: round(withMs / withoutMs, 3),
    withOutboxMsPerTx: round(withMs, 3),
    withoutOutboxMsPerTx: round(withoutMs, 3),
    transactions,
  };
}
