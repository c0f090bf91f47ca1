import {
  errorText,
  type OutgoingMessage,
  type PublishOutcome,
  type Publisher,
} from '../publishers/publisher.js';
import type { BatchTrace } from './dispatch-spans.js';

/** What became of one claimed message in {@link publishInOrder}. */
export type MessageFate =
  | { kind: 'outcome'; outcome: PublishOutcome }
  /** A shadow message: settled as dispatched without the publisher, in its place in the run. */
  | { kind: 'shadow' }
  /** Claimed more often than `maxAttempts` without a settle: dead-letter it, stop its run. */
  | { kind: 'exhausted' }
  /** Never handed to the publisher: behind a failure in its run, or out of time. */
  | { kind: 'unsent' };

/** Options of {@link publishInOrder}. */
export interface OrderedPublishOptions {
  maxAttempts: number;
  /** Epoch ms after which no new publish call starts and a running one is abandoned. */
  deadline: number;
  /** Error text of messages whose publish call was abandoned at the deadline. */
  timeoutError: string;
  /**
   * The batch's tracing (dispatch-spans.ts): a `send` span per message around the call that
   * carries it, the call made in the batch span's context. Undefined: no tracing.
   */
  trace?: BatchTrace;
  /** Called once per publish call with the messages and their outcomes. */
  onOutcomes?: (
    messages: readonly OutgoingMessage[],
    outcomes: readonly PublishOutcome[],
    durationMs: number,
  ) => void;
}

/**
 * Publishes a claim's messages so that each aggregate's run goes out in sequence order and stops
 * at its first failure (issue 16). Messages are grouped into lanes: one per ordered aggregate
 * (its run, by sequence), one per unordered message. Each round makes ONE publish call with the
 * next message of every live lane, so aggregates still go in parallel and a publisher still gets
 * batches; the next message of a lane goes only once the previous one is `published`. A lane
 * whose message fails stops: the rest of it is `unsent` (released: no attempt counted, still
 * behind the failed one). A publisher that declares `ordersWithinCall` gets each lane whole in
 * one call instead, and must itself stop a lane at its first failure.
 *
 * Why rounds and not a promise chain per lane: a call per message per aggregate would give a
 * publisher with a batch API (NATS, Kafka, SQS) hundreds of single-message calls at once.
 *
 * Returns one fate per message, in the order given.
 */
export async function publishInOrder(
  publisher: Publisher,
  messages: readonly OutgoingMessage[],
  options: OrderedPublishOptions,
): Promise<MessageFate[]> {
  const fates = new Map<OutgoingMessage, MessageFate>();
  const lanes = toLanes(messages);
  const publishable = (m: OutgoingMessage): boolean => {
    if (m.attempts > options.maxAttempts) {
      fates.set(m, { kind: 'exhausted' });
      return false;
    }
    if (m.shadow) fates.set(m, { kind: 'shadow' });
    return !m.shadow;
  };
  const stop = (lane: Lane) => {
    for (const m of lane.messages.slice(lane.next))
      if (!fates.has(m)) fates.set(m, { kind: 'unsent' });
    lane.next = lane.messages.length;
  };

  if (publisher.ordersWithinCall) {
    const batch: OutgoingMessage[] = [];
    for (const lane of lanes) {
      for (const m of lane.messages) {
        if (publishable(m)) batch.push(m);
        else if (fates.get(m)?.kind === 'exhausted') break;
      }
    }
    const outcomes = await call(publisher, batch, options);
    batch.forEach((m, i) => fates.set(m, { kind: 'outcome', outcome: outcomes[i]! }));
    // Anything after a message that is not published stays unsent, whatever was reported for it
    // — unless the publisher says it went out (then it did, and it is settled as published).
    for (const lane of lanes) {
      let failed = false;
      for (const m of lane.messages) {
        const fate = fates.get(m);
        if (failed && !(fate?.kind === 'outcome' && fate.outcome.status === 'published'))
          fates.set(m, { kind: 'unsent' });
        if (
          !fate ||
          fate.kind === 'exhausted' ||
          (fate.kind === 'outcome' && fate.outcome.status !== 'published')
        )
          failed = true;
      }
    }
    return messages.map((m) => fates.get(m) ?? { kind: 'unsent' });
  }

  for (;;) {
    const round: { lane: Lane; message: OutgoingMessage }[] = [];
    for (const lane of lanes) {
      while (lane.next < lane.messages.length) {
        const m = lane.messages[lane.next]!;
        if (publishable(m)) {
          round.push({ lane, message: m });
          break;
        }
        lane.next++;
        if (fates.get(m)?.kind === 'exhausted') stop(lane);
      }
    }
    if (round.length === 0) break;
    if (Date.now() >= options.deadline) {
      for (const { lane } of round) stop(lane);
      break;
    }
    const outcomes = await call(
      publisher,
      round.map((r) => r.message),
      options,
    );
    round.forEach(({ lane, message }, i) => {
      const outcome = outcomes[i]!;
      fates.set(message, { kind: 'outcome', outcome });
      lane.next++;
      if (outcome.status !== 'published') stop(lane);
    });
  }
  return messages.map((m) => fates.get(m) ?? { kind: 'unsent' });
}

interface Lane {
  messages: OutgoingMessage[];
  /** Index of the next message to publish. */
  next: number;
}

function toLanes(messages: readonly OutgoingMessage[]): Lane[] {
  const lanes: Lane[] = [];
  const byAggregate = new Map<string, Lane>();
  for (const m of messages) {
    if (m.ordered === false) {
      lanes.push({ messages: [m], next: 0 });
      continue;
    }
    let lane = byAggregate.get(m.aggregateId);
    if (!lane) {
      lane = { messages: [], next: 0 };
      byAggregate.set(m.aggregateId, lane);
      lanes.push(lane);
    }
    lane.messages.push(m);
  }
  for (const lane of byAggregate.values()) lane.messages.sort((a, b) => a.sequence - b.sequence);
  return lanes;
}

/**
 * One publish call, abandoned at the deadline: its messages then come back `retryable`, so no
 * other dispatcher can claim them while this publish might still be delivering them (G3). A
 * throw or a wrong number of outcomes is `retryable` for every message of the call.
 */
async function call(
  publisher: Publisher,
  messages: OutgoingMessage[],
  options: OrderedPublishOptions,
): Promise<PublishOutcome[]> {
  if (messages.length === 0) return [];
  const started = Date.now();
  const controller = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const spans = options.trace?.send(publisher, messages);
  const handed = spans?.messages ?? messages;
  const timedOut = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), Math.max(0, options.deadline - started));
  });
  let outcomes: PublishOutcome[];
  try {
    const publish = () => publisher.publish(handed, { signal: controller.signal });
    const publishing = options.trace ? options.trace.within(publish) : publish();
    const result = await Promise.race([publishing, timedOut]);
    if (result === 'timeout') {
      controller.abort();
      outcomes = messages.map(() => ({ status: 'retryable', error: options.timeoutError }));
    } else if (!Array.isArray(result) || result.length !== messages.length) {
      const got = Array.isArray(result) ? result.length : typeof result;
      outcomes = messages.map(() => ({
        status: 'retryable',
        error: `publisher returned ${got} outcomes for ${messages.length} messages`,
      }));
    } else {
      outcomes = result;
    }
  } catch (error) {
    outcomes = messages.map(() => ({ status: 'retryable', error: errorText(error) }));
  } finally {
    clearTimeout(timer);
  }
  spans?.end(outcomes);
  options.onOutcomes?.(messages, outcomes, Date.now() - started);
  return outcomes;
}
