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
        { id: '1', state: 'done', availableAtMs: null },
        { id: '2', state: 'done', availableAtMs: null },
      ],
      t,
      options,
    );
    expect([...t.candidates]).toEqual([]);
    expect(t.resolved).toEqual(['1', '2']);
    expect(next).toBeUndefined();
  });

  it('a row not found is "not visible yet" first (look again in 2 ms), deleted only after 10 s', () => {
    const t = target(['7']);
    const row = { id: '7', state: 'gone' as const, availableAtMs: null };
    expect(classifyCandidates([row], t, options)).toBe(2);
    expect(t.candidates.has('7')).toBe(true);
    expect(t.resolved).toEqual([]);
    expect(classifyCandidates([row], t, { ...options, now: options.now + 5_000 })).toBe(2);
    expect(classifyCandidates([row], t, { ...options, now: options.now + 10_001 })).toBeUndefined();
    expect(t.candidates.has('7')).toBe(false);
    expect(t.resolved).toEqual(['7']);
  });

  it('deferred rows are resolved; kept until due, or handed to the sweeper past maxHoldMs', () => {
    const t = target(['soon', 'late']);
    const next = classifyCandidates(
      [
        { id: 'soon', state: 'deferred', availableAtMs: options.now + 3_000 },
        { id: 'late', state: 'deferred', availableAtMs: options.now + 120_000 },
      ],
      t,
      options,
    );
    expect(t.resolved).toEqual(['soon', 'late']);
    expect([...t.candidates]).toEqual(['soon']);
    expect(next).toBe(3_000);
  });

  it('leased or blocked rows stay candidates, unresolved, and are looked at after recheckMs', () => {
    const t = target(['a', 'b']);
    const next = classifyCandidates(
      [
        { id: 'a', state: 'leased', availableAtMs: null },
        { id: 'b', state: 'blocked', availableAtMs: null },
      ],
      t,
      options,
    );
    expect([...t.candidates]).toEqual(['a', 'b']);
    expect(t.resolved).toEqual([]);
    expect(next).toBe(250);
  });
});
