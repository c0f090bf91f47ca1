/**
 * The history checker every delivery test uses: given what was committed and what the broker
 * saw, it reports lost messages, per-aggregate order violations, concurrent double publishes
 * and the duplicate count. Times are any monotonic numbers (hrtime ns, counters).
 */
export interface ExpectedMessage {
  messageId: string;
  aggregateId: string;
  sequence: number;
  /** Ordered topics only are checked for order. */
  ordered: boolean;
}

export interface PublishEvent {
  messageId: string;
  /** Who published (dispatcher id or pid). */
  publisher: string;
  /** When the broker started receiving it. */
  start: number;
  /** When the broker acknowledged it. */
  end: number;
  /** Where it was sent (the receiver's request path), when the test routes publishers apart. */
  via?: string;
}

export interface HistoryReport {
  lost: string[];
  unexpected: string[];
  /** Pairs (n, n+1) of one aggregate where n+1 arrived before n was acknowledged. */
  orderViolations: { aggregateId: string; sequence: number; next: number }[];
  /** The same message in flight from two publishers at the same time (G3). */
  concurrentDuplicates: { messageId: string; publishers: [string, string] }[];
  /** Deliveries beyond the first, summed over messages. */
  duplicates: number;
}

export function checkHistory(
  expected: readonly ExpectedMessage[],
  events: readonly PublishEvent[],
): HistoryReport {
  const byMessage = new Map<string, PublishEvent[]>();
  for (const event of events) {
    const list = byMessage.get(event.messageId) ?? [];
    list.push(event);
    byMessage.set(event.messageId, list);
  }
  const expectedIds = new Set(expected.map((m) => m.messageId));
  const lost = expected.filter((m) => !byMessage.has(m.messageId)).map((m) => m.messageId);
  const unexpected = [...byMessage.keys()].filter((id) => !expectedIds.has(id));

  let duplicates = 0;
  const concurrentDuplicates: HistoryReport['concurrentDuplicates'] = [];
  for (const [messageId, list] of byMessage) {
    duplicates += list.length - 1;
    const sorted = [...list].sort((a, b) => a.start - b.start);
    for (let i = 1; i < sorted.length; i++) {
      const previous = sorted[i - 1]!;
      const current = sorted[i]!;
      if (current.start < previous.end && current.publisher !== previous.publisher) {
        concurrentDuplicates.push({
          messageId,
          publishers: [previous.publisher, current.publisher],
        });
      }
    }
  }

  const orderViolations: HistoryReport['orderViolations'] = [];
  const byAggregate = new Map<string, ExpectedMessage[]>();
  for (const m of expected) {
    if (!m.ordered) continue;
    const list = byAggregate.get(m.aggregateId) ?? [];
    list.push(m);
    byAggregate.set(m.aggregateId, list);
  }
  for (const [aggregateId, list] of byAggregate) {
    list.sort((a, b) => a.sequence - b.sequence);
    for (let i = 1; i < list.length; i++) {
      const previous = byMessage.get(list[i - 1]!.messageId);
      const current = byMessage.get(list[i]!.messageId);
      if (!previous || !current) continue; // reported as lost
      const firstAck = Math.min(...previous.map((e) => e.end));
      const firstStart = Math.min(...current.map((e) => e.start));
      if (firstStart < firstAck)
        orderViolations.push({
          aggregateId,
          sequence: list[i - 1]!.sequence,
          next: list[i]!.sequence,
        });
    }
  }
  return { lost, unexpected, orderViolations, concurrentDuplicates, duplicates };
}

/** Expected messages from what the writer returned; every message ordered unless `ordered` says. */
export function expectedOf(
  written: readonly { messageId: string; aggregateId: string; sequence: number; topic?: string }[],
  ordered: (message: { topic?: string }) => boolean = () => true,
): ExpectedMessage[] {
  return written.map((m) => ({
    messageId: m.messageId,
    aggregateId: m.aggregateId,
    sequence: m.sequence,
    ordered: ordered(m),
  }));
}

/**
 * Events of a publisher that delivers one message at a time in array order (InMemoryPublisher's
 * `published`): message i occupies the instant [i, i + 0.5].
 */
export function eventsInOrder(published: readonly { id: string }[]): PublishEvent[] {
  return published.map((m, i) => ({ messageId: m.id, publisher: 'p', start: i, end: i + 0.5 }));
}
