import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Reconnecting } from '../../../src/dispatcher/wake/reconnecting.js';

/**
 * The reconnect state machine of the LISTEN/NOTIFY and lanes CDC wake sources: its states, the
 * doubling backoff that an open resets, and the one reopen timer that stop() cancels.
 */
describe('Reconnecting', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  // random 0: the jitter's lowest factor, 0.5, so the delays are 50, 100, 200 ... ms.
  const reconnecting = (reopen: () => void) =>
    new Reconnecting(reopen, { minMs: 100, maxMs: 300 }, () => 0);

  it('goes created → opening → waiting, reopens when the doubling delay has passed, and starts over after an open', () => {
    const reopen = vi.fn();
    const life = reconnecting(reopen);
    expect(life.state).toBe('created');
    life.opening();
    expect(life.state).toBe('opening');
    expect(life.failed()).toBe(50);
    expect(life.state).toBe('waiting');
    vi.advanceTimersByTime(49);
    expect(reopen).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1);
    expect(reopen).toHaveBeenCalledTimes(1);
    life.opening();
    expect(life.failed()).toBe(100);
    life.opening();
    expect(life.failed()).toBe(150); // capped at maxMs 300, times 0.5
    life.opening();
    expect(life.opened()).toBe(false);
    expect(life.state).toBe('open');
    expect(life.failed()).toBe(50);
    life.opening();
    expect(life.opened()).toBe(true);
  });

  it('stop() is final: it cancels a pending reopen and nothing is scheduled after it', () => {
    const reopen = vi.fn();
    const life = reconnecting(reopen);
    life.opening();
    life.failed();
    life.stop();
    expect(life.state).toBe('stopped');
    vi.advanceTimersByTime(1_000);
    expect(reopen).not.toHaveBeenCalled();
    life.opening();
    expect(life.state).toBe('stopped');
    expect(life.failed()).toBeUndefined();
    vi.advanceTimersByTime(1_000);
    expect(reopen).not.toHaveBeenCalled();
  });
});
