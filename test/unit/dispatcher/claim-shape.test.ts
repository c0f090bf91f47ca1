import { describe, expect, it } from 'vitest';
import { ClaimShape, FAST_CALL_MS, PROBE_EVERY } from '../../../src/dispatcher/claim-shape.js';
import { resolveDispatcherOptions } from '../../../src/index.js';

/** `n` ordered messages on `aggregates` aggregates, round-robin. */
const ordered = (n: number, aggregates: number) =>
  Array.from({ length: n }, (_, i) => ({ aggregateId: `a-${i % aggregates}` }));
const unordered = (n: number) =>
  Array.from({ length: n }, (_, i) => ({ aggregateId: `u-${i}`, ordered: false }));

describe('ClaimShape (heads first or runs first)', () => {
  it('claims heads first until a publish call was timed', () => {
    const shape = new ClaimShape(200, false);
    expect(shape.maxHeads()).toBeUndefined();
  });

  it('takes runs first behind a fast publisher, heads first behind a slow one', () => {
    const fast = new ClaimShape(200, false);
    fast.noteCall(0);
    expect(fast.maxHeads()).toBe(10);
    const slow = new ClaimShape(200, false);
    slow.noteCall(12);
    expect(slow.maxHeads()).toBeUndefined();
  });

  it('turns runs first off within a few calls once the destination slows down', () => {
    const shape = new ClaimShape(200, false);
    for (let i = 0; i < 20; i++) shape.noteCall(0);
    expect(shape.maxHeads()).toBe(10);
    let calls = 0;
    while (shape.maxHeads() !== undefined) {
      shape.noteCall(5);
      calls++;
    }
    expect(calls).toBeGreaterThan(0);
    expect(calls).toBeLessThanOrEqual(3);
    // Back under the threshold, on again.
    for (let i = 0; i < 30; i++) shape.noteCall(FAST_CALL_MS / 10);
    expect(shape.maxHeads()).toBe(10);
  });

  it('a publisher that sends a run in one call gets runs first without being timed', () => {
    expect(new ClaimShape(200, true).maxHeads()).toBe(10);
  });

  it('goes heads first while the claims are mostly unordered messages (they have no runs)', () => {
    const shape = new ClaimShape(200, true);
    shape.maxHeads();
    shape.noteClaim(unordered(150).concat(ordered(50, 5) as never[]));
    expect(shape.maxHeads()).toBeUndefined();
    shape.noteClaim(ordered(200, 200));
    expect(shape.maxHeads()).toBe(10);
  });

  it('after a runs-first claim that found no run, goes heads first for a while, then tries again', () => {
    const shape = new ClaimShape(200, true);
    expect(shape.maxHeads()).toBe(10);
    shape.noteClaim(ordered(200, 200)); // every aggregate one message deep
    for (let i = 0; i < PROBE_EVERY; i++) {
      expect(shape.maxHeads(), `claim ${i}`).toBeUndefined();
      shape.noteClaim(ordered(200, 200));
    }
    expect(shape.maxHeads()).toBe(10);
    shape.noteClaim(ordered(200, 20)); // runs found: stays
    expect(shape.maxHeads()).toBe(10);
  });

  it('the option overrides the measurement either way', () => {
    const heads = new ClaimShape(200, true, 'heads-first');
    heads.noteCall(0);
    expect(heads.maxHeads()).toBeUndefined();
    const runs = new ClaimShape(200, false, 'runs-first');
    runs.noteCall(100);
    expect(runs.maxHeads()).toBe(10);
  });

  it('small batches are not split', () => {
    const shape = new ClaimShape(30, true);
    expect(shape.maxHeads()).toBeUndefined();
  });

  it('claimShape is checked with the other options', () => {
    expect(
      resolveDispatcherOptions({
        publisher: { publish: async () => [] },
        claimShape: 'runs-first',
      }).claimShape,
    ).toBe('runs-first');
    expect(() =>
      resolveDispatcherOptions({
        publisher: { publish: async () => [] },
        claimShape: 'runs' as never,
      }),
    ).toThrow(/claimShape.*"auto", "heads-first" or "runs-first"/);
  });
});
