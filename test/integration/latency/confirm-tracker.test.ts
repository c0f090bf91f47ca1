// Pure unit test of the CDC confirmation rule (kept beside the CDC tests it supports).
import { describe, expect, it } from 'vitest';
import { ConfirmTracker } from '../../../src/cdc/confirm-tracker.js';
import { formatLsn, parseLsn } from '../../../src/cdc/lsn.js';

describe('ConfirmTracker', () => {
  it('confirms only the fully resolved prefix of transactions, in commit order', () => {
    const t = new ConfirmTracker(100n);
    t.begin();
    t.commit(200n, ['a', 'b']);
    t.begin();
    t.commit(300n, ['c']);
    t.resolve('c'); // a later transaction resolved first: nothing moves
    expect(t.confirmed).toBe(100n);
    t.resolve('a');
    expect(t.confirmed).toBe(100n);
    t.resolve('b');
    expect(t.confirmed).toBe(300n);
    expect(t.pending).toBe(0);
  });

  it('moves on keepalives only while nothing is pending or open', () => {
    const t = new ConfirmTracker(100n);
    t.keepalive(150n);
    expect(t.confirmed).toBe(150n);
    t.begin(); // a transaction is being streamed: its commit is still to come
    t.keepalive(400n);
    expect(t.confirmed).toBe(150n);
    t.commit(450n, ['x']);
    t.keepalive(500n);
    expect(t.confirmed).toBe(150n);
    t.resolve('x');
    expect(t.confirmed).toBe(450n);
    t.keepalive(500n);
    expect(t.confirmed).toBe(500n);
    t.keepalive(120n); // never backwards
    expect(t.confirmed).toBe(500n);
  });

  it('transactions without outbox rows confirm at once; re-streamed ones are ignored; reset forgets', () => {
    const t = new ConfirmTracker(100n);
    t.commit(90n, ['old']); // at or before the confirmed position: already handled
    expect(t.pending).toBe(0);
    t.commit(200n, ['y']);
    t.commit(250n, []);
    expect(t.confirmed).toBe(100n);
    t.reset();
    expect(t.pending).toBe(0);
    t.resolve('y'); // unknown after reset: no effect
    expect(t.confirmed).toBe(100n);
  });

  it('parses and formats LSNs', () => {
    expect(parseLsn('16/B374D848')).toBe((0x16n << 32n) | 0xb374d848n);
    expect(formatLsn(parseLsn('0/1'))).toBe('0/1');
    expect(formatLsn(parseLsn('16/B374D848'))).toBe('16/B374D848');
    expect(() => parseLsn('nope')).toThrow(/not an LSN/);
  });
});
