import type { MessageFate } from '../dispatcher/ordered-publish.js';
import {
  errorText,
  type OutgoingMessage,
  type PublishOutcome,
  type Publisher,
} from '../publishers/publisher.js';

/** Options of {@link sendInOrder}. */
export interface OrderedSendOptions {
  maxAttempts: number;
  /** Epoch ms (real time) after which no new publish call starts and a running one is abandoned. */
  deadline: number;
  /** Error text of messages whose publish call was abandoned at the deadline. */
  timeoutError: string;
}

/**
 * The Worker's copy of `publishInOrder` (src/dispatcher/ordered-publish.ts), with the same
 * semantics: each aggregate's run goes out in sequence order and stops at its first failure; the
 * rest of the run is `unsent` (released: no attempt counted, still behind the failed message).
 * Messages are grouped into lanes — one per ordered aggregate, one per unordered message. A
 * publisher that declares `ordersWithinCall` (the Queues publisher does) gets every lane whole in
 * ONE call; any other gets rounds: one call per round with the next message of every live lane.
 *
 * A copy rather than an import because the Node dispatcher's version carries its tracing
 * (OpenTelemetry), which the Worker bundle keeps out: `agent-outbox/cloudflare` runs on Web APIs
 * only (test/cloudflare checks the bundle). D1 rejects shadow messages, so there are none here.
 *
 * Returns one fate per message, in the order given.
 */
export async function sendInOrder(
  publisher: Publisher,
  messages: readonly OutgoingMessage[],
  options: OrderedSendOptions,
): Promise<MessageFate[]> {
  const fates = new Map<OutgoingMessage, MessageFate>();
  const lanes = toLanes(messages);
  // Claimed more often than allowed without a settle: earlier runs died mid-send.
  const exhausted = (m: OutgoingMessage): boolean => {
    if (m.attempts <= options.maxAttempts) return false;
    fates.set(m, { kind: 'exhausted' });
    return true;
  };

  if (publisher.ordersWithinCall) {
    const batch: OutgoingMessage[] = [];
    for (const lane of lanes) {
      for (const m of lane) {
        if (exhausted(m)) break;
        batch.push(m);
      }
    }
    const outcomes = await call(publisher, batch, options);
    batch.forEach((m, i) => fates.set(m, { kind: 'outcome', outcome: outcomes[i]! }));
    // After a message that was not published, its lane is unsent — unless the publisher says a
    // later one went out (then it did, and it is settled as published).
    for (const lane of lanes) {
      let failed = false;
      for (const m of lane) {
        const fate = fates.get(m);
        const published = fate?.kind === 'outcome' && fate.outcome.status === 'published';
        if (failed && !published) fates.set(m, { kind: 'unsent' });
        if (!published) failed = true;
      }
    }
    return messages.map((m) => fates.get(m) ?? { kind: 'unsent' });
  }

  const live = lanes.map((lane) => ({ lane, next: 0 }));
  for (;;) {
    const round = live.filter((l) => l.next < l.lane.length);
    const sending = round.filter((l) => !exhausted(l.lane[l.next]!));
    for (const l of round) if (!sending.includes(l)) l.next = l.lane.length; // lane stops
    if (sending.length === 0) break;
    if (Date.now() >= options.deadline) break;
    const outcomes = await call(
      publisher,
      sending.map((l) => l.lane[l.next]!),
      options,
    );
    sending.forEach((l, i) => {
      const outcome = outcomes[i]!;
      fates.set(l.lane[l.next]!, { kind: 'outcome', outcome });
      l.next = outcome.status === 'published' ? l.next + 1 : l.lane.length;
    });
  }
  return messages.map((m) => fates.get(m) ?? { kind: 'unsent' });
}

/** One lane per ordered aggregate (its messages by sequence), one per unordered message. */
function toLanes(messages: readonly OutgoingMessage[]): OutgoingMessage[][] {
  const lanes: OutgoingMessage[][] = [];
  const byAggregate = new Map<string, OutgoingMessage[]>();
  for (const m of messages) {
    if (m.ordered === false) {
      lanes.push([m]);
      continue;
    }
    let lane = byAggregate.get(m.aggregateId);
    if (!lane) {
      lane = [];
      byAggregate.set(m.aggregateId, lane);
      lanes.push(lane);
    }
    lane.push(m);
  }
  for (const lane of byAggregate.values()) lane.sort((a, b) => a.sequence - b.sequence);
  return lanes;
}

/**
 * One publish call, abandoned at the deadline: its messages then come back `retryable`, so no
 * other run can claim them while this send might still be delivering them (G3). A throw or a
 * wrong number of outcomes is `retryable` for every message of the call.
 */
async function call(
  publisher: Publisher,
  messages: OutgoingMessage[],
  options: OrderedSendOptions,
): Promise<PublishOutcome[]> {
  if (messages.length === 0) return [];
  const controller = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), Math.max(0, options.deadline - Date.now()));
  });
  const failAll = (error: string): PublishOutcome[] =>
    messages.map(() => ({ status: 'retryable', error }));
  try {
    const result = await Promise.race([
      publisher.publish(messages, { signal: controller.signal }),
      timedOut,
    ]);
    if (result === 'timeout') {
      controller.abort();
      return failAll(options.timeoutError);
    }
    if (!Array.isArray(result) || result.length !== messages.length) {
      const got = Array.isArray(result) ? result.length : typeof result;
      return failAll(`publisher returned ${got} outcomes for ${messages.length} messages`);
    }
    return result;
  } catch (error) {
    return failAll(errorText(error));
  } finally {
    clearTimeout(timer);
  }
}
