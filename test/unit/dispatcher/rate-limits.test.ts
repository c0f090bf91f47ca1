import { describe, expect, it } from 'vitest';
import {
  checkRateLimits,
  limitFor,
  parseRateLimitFlag,
} from '../../../src/dispatcher/rate-limits.js';
import { heldBehind } from '../../../src/dispatcher/route-order.js';
import type { Settlement } from '../../../src/dispatcher/outbox-store.js';
import type { OutgoingMessage } from '../../../src/publishers/publisher.js';

describe('--rate-limit', () => {
  it('parses PATTERN=N/s and PATTERN=N/s:BURST', () => {
    expect(parseRateLimitFlag('payment.*=50/s:100')).toEqual({
      pattern: 'payment.*',
      perSecond: 50,
      burst: 100,
    });
    expect(parseRateLimitFlag('mail.*=0.5/s')).toEqual({ pattern: 'mail.*', perSecond: 0.5 });
  });

  it('refuses malformed values, saying what to write', () => {
    for (const bad of ['payment.*', 'payment.*=50', '=5/s', 'x=0/s', 'x=5/s:0', 'x=5/m'])
      expect(() => parseRateLimitFlag(bad), bad).toThrow(/PATTERN=N\/s|must be/);
  });

  it('defaults the burst to one second of the rate, at least 1', () => {
    expect(checkRateLimits([{ pattern: 'a', perSecond: 20 }])[0]!.burst).toBe(20);
    expect(checkRateLimits([{ pattern: 'a', perSecond: 0.2 }])[0]!.burst).toBe(1);
  });

  it('a topic takes its most specific matching limit', () => {
    const limits = [{ pattern: '*' }, { pattern: 'payment.*' }, { pattern: 'payment.charge' }];
    expect(limitFor(limits, 'payment.charge')?.pattern).toBe('payment.charge');
    expect(limitFor(limits, 'payment.refund')?.pattern).toBe('payment.*');
    expect(limitFor(limits.slice(1), 'mail.send')).toBeUndefined();
  });
});

describe('heldBehind', () => {
  const m = (aggregateId: string, sequence: number, ordered = true): OutgoingMessage => ({
    id: `${aggregateId}-${sequence}`,
    rowId: `${aggregateId}-${sequence}`,
    topic: 't',
    aggregateId,
    sequence,
    ...(ordered ? {} : { ordered: false }),
    payload: null,
    headers: {},
    createdAt: new Date(0),
    attempts: 1,
  });

  it('releases what an aggregate had behind a held message, not before it, not other aggregates', () => {
    const a1 = m('a', 1);
    const a2 = m('a', 2);
    const a3 = m('a', 3);
    const b1 = m('b', 1);
    const u = m('a', 4, false);
    const held = new Map<OutgoingMessage, Settlement>([
      [a2, { rowId: a2.rowId, kind: 'defer', delayMs: 10, reason: 'limit' }],
    ]);
    heldBehind([a1, a2, a3, b1, u], held);
    expect([...held.keys()].map((x) => x.id).sort()).toEqual(['a-2', 'a-3']);
    expect(held.get(a3)).toEqual({ rowId: 'a-3', kind: 'release' });
  });
});
