import type { OutgoingMessage } from '../publishers/publisher.js';
import type { Settlement } from './outbox-store.js';

/**
 * Keeps per-aggregate order when some claimed messages are given back (deferred: a paused route,
 * a rate limit): every ordered message of the same aggregate claimed behind one that is held is
 * held too — released (no attempt, no new time: it waits in its chain behind the held one, which
 * is still pending). Mutates `held`.
 */
export function heldBehind(
  messages: readonly OutgoingMessage[],
  held: Map<OutgoingMessage, Settlement>,
): void {
  if (held.size === 0) return;
  const firstHeld = new Map<string, number>();
  for (const m of held.keys())
    if (m.ordered !== false)
      firstHeld.set(m.aggregateId, Math.min(firstHeld.get(m.aggregateId) ?? Infinity, m.sequence));
  for (const m of messages) {
    if (m.ordered === false || held.has(m)) continue;
    const first = firstHeld.get(m.aggregateId);
    if (first !== undefined && m.sequence > first) held.set(m, { rowId: m.rowId, kind: 'release' });
  }
}
