import { ack, retry, type DeliveryResult } from './delivery-result.js';
/**
 * How a consumer checks the per-aggregate sequence of an ordered topic against the last one it
 * processed for that aggregate (`last`, 0 when none):
 *
 * - `monotonic` (default): process any `sequence > last`; acknowledge `sequence <= last` as stale.
 *   Never waits, so gaps are harmless — and gaps are normal: sequences count every message of an
 *   aggregate across ALL topics, and one consumer rarely subscribes to all of them. The price:
 *   when n+1 overtakes n, n is then stale and is acknowledged WITHOUT running. Use it when a later
 *   message supersedes an earlier one (state snapshots, "latest status" notifications).
 * - `strict`: process only `sequence === last + 1`; defer a later one (retry with delay) until its
 *   predecessor was processed; acknowledge stale ones. No message is ever skipped, but the
 *   consumer must see EVERY message of the aggregate from sequence 1 (all its topics, no
 *   dead-lettered predecessor), or the aggregate stalls: deferred forever, visible as retries.
 */
export type OrderCheck = 'strict' | 'monotonic';

/** What the sequence check decided for one delivery. */
export type OrderVerdict = 'process' | 'early' | 'stale';

/**
 * Which topics are ordered, and how. An array lists ordered topics checked with `check`; a record
 * gives a check per topic; a function decides per topic (undefined: not ordered).
 */
export interface OrderingOptions {
  topics:
    | readonly string[]
    | Readonly<Record<string, OrderCheck>>
    | ((topic: string) => OrderCheck | undefined);
  /** Check for topics listed in an array. Default `monotonic`. */
  check?: OrderCheck;
  /**
   * How long a strict consumer defers a message that arrived before its predecessor, in ms.
   * Default 1000: short, because the predecessor is usually already in flight.
   */
  earlyRetryDelayMs?: number;
}

/** The check to apply to `topic`, or undefined when the topic is not ordered. */
export function orderCheckFor(
  options: OrderingOptions | undefined,
  topic: string,
): OrderCheck | undefined {
  if (!options) return undefined;
  const { topics } = options;
  if (typeof topics === 'function') return topics(topic);
  if (Array.isArray(topics))
    return topics.includes(topic) ? (options.check ?? 'monotonic') : undefined;
  const record = topics as Readonly<Record<string, OrderCheck>>;
  return Object.hasOwn(record, topic) ? record[topic] : undefined;
}

/** Pure decision of the sequence check. */
export function checkOrder(check: OrderCheck, last: number, sequence: number): OrderVerdict {
  if (sequence <= last) return 'stale';
  if (check === 'strict' && sequence !== last + 1) return 'early';
  return 'process';
}

/**
 * The delivery result an ordering verdict calls for: `ack` a stale message, `retry` an early one
 * after `earlyRetryMs`, or undefined to go ahead and process it. Shared by every consumer runtime
 * (Postgres and Cloudflare) so both answer the same way.
 */
export function orderingResult(
  check: OrderCheck,
  last: number,
  message: { id: string; sequence: number },
  earlyRetryMs: number,
): DeliveryResult | undefined {
  const verdict = checkOrder(check, last, message.sequence);
  if (verdict === 'stale')
    return ack('stale', message.id, `sequence ${message.sequence} <= position ${last}`);
  if (verdict === 'early')
    return retry(
      'early',
      earlyRetryMs,
      message.id,
      `sequence ${message.sequence}, position ${last}`,
    );
  return undefined;
}
