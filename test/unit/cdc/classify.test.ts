import { describe, expect, it } from 'vitest';
import { classifyCandidates, type ClassifyTarget } from '../../../src/cdc/classify.js';

function target(ids: string[]): ClassifyTarget & { resolved: string[] } {
  const resolved: string[] = [];
  return {
    candidates: new Set(ids),
    missingSince: new Map(),
    resolve: (id) => void resolved.push(id),
    resolved,
  };
}

const options = { now: 1_000_000, recheckMs: 250, maxHoldMs: 60_000 };

describe('classifyCandidates', () => {
  it('done rows leave the candidates and are resolved; nothing to look at again', () => {
    const t = target(['1', '2']);
    const next = classifyCandidates(
      [
        { id: '1', state: 'done', dueInMs: null },
        { id: '2', state: 'done', dueInMs: null },
      ],
      t,
      options,
    );
    expect([...t.candidates]).toEqual([]);
    expect(t.resolved).toEqual(['1', '2']);
    expect(next).toEqual({ recheckInMs: undefined, dueInMs: undefined, deferred: 0 });
  });

  it('a row not found is "not visible yet" first (look again in 2 ms), deleted only after 10 s', () => {
    const t = target(['7']);
    const row = { id: '7', state: 'gone' as const, dueInMs: null };
    const recheck = (now: number) => classifyCandidates([row], t, { ...options, now }).recheckInMs;
    expect(recheck(options.now)).toBe(2);
    expect(t.candidates.has('7')).toBe(true);
    expect(t.resolved).toEqual([]);
    expect(recheck(options.now + 5_000)).toBe(2);
    expect(recheck(options.now + 10_001)).toBeUndefined();
    expect(t.candidates.has('7')).toBe(false);
    expect(t.resolved).toEqual(['7']);
  });

  it('deferred rows are resolved and leave the candidates; the earliest due time within maxHoldMs is reported', () => {
    const t = target(['soon', 'later', 'late', 'held', 'dead-head']);
    const next = classifyCandidates(
      [
        { id: 'later', state: 'deferred', dueInMs: 5_000 },
        // As the driver hands numeric over; due when its head's backoff ends (sql/cdc.ts).
        { id: 'soon', state: 'deferred', dueInMs: '2999.5' },
        { id: 'late', state: 'deferred', dueInMs: 120_000 },
        { id: 'held', state: 'deferred', dueInMs: 'Infinity' },
        { id: 'dead-head', state: 'deferred', dueInMs: null },
      ],
      t,
      options,
    );
    expect(t.resolved).toEqual(['later', 'soon', 'late', 'held', 'dead-head']);
    expect([...t.candidates]).toEqual([]);
    expect(next).toEqual({ recheckInMs: undefined, dueInMs: 2_999.5, deferred: 5 });
  });

  it("the due time is the server's, relative: a dispatcher clock far off changes nothing", () => {
    const t = target(['a']);
    const next = classifyCandidates([{ id: 'a', state: 'deferred', dueInMs: 200 }], t, {
      ...options,
      now: options.now + 3_600_000,
    });
    expect(next.dueInMs).toBe(200);
  });

  it('leased or blocked rows stay candidates, unresolved, and are looked at after recheckMs', () => {
    const t = target(['a', 'b']);
    const next = classifyCandidates(
      [
        { id: 'a', state: 'leased', dueInMs: null },
        { id: 'b', state: 'blocked', dueInMs: null },
      ],
      t,
      options,
    );
    expect([...t.candidates]).toEqual(['a', 'b']);
    expect(t.resolved).toEqual([]);
    expect(next).toEqual({ recheckInMs: 250, dueInMs: undefined, deferred: 0 });
  });
});
