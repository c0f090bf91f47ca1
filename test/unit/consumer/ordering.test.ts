import { describe, expect, it } from 'vitest';
import { checkOrder, orderCheckFor } from '../../../src/consumer/ordering.js';

describe('checkOrder', () => {
  it('strict accepts only last + 1', () => {
    expect(checkOrder('strict', 0, 1)).toBe('process');
    expect(checkOrder('strict', 0, 2)).toBe('early');
    expect(checkOrder('strict', 4, 5)).toBe('process');
    expect(checkOrder('strict', 4, 4)).toBe('stale');
    expect(checkOrder('strict', 4, 1)).toBe('stale');
  });
  it('monotonic accepts any later sequence and never defers', () => {
    expect(checkOrder('monotonic', 0, 9)).toBe('process');
    expect(checkOrder('monotonic', 9, 9)).toBe('stale');
    expect(checkOrder('monotonic', 9, 3)).toBe('stale');
  });
});

describe('orderCheckFor', () => {
  it('array: listed topics get the default check (monotonic) or the given one', () => {
    expect(orderCheckFor({ topics: ['a'] }, 'a')).toBe('monotonic');
    expect(orderCheckFor({ topics: ['a'], check: 'strict' }, 'a')).toBe('strict');
    expect(orderCheckFor({ topics: ['a'] }, 'b')).toBeUndefined();
  });
  it('record and function forms, and no ordering at all', () => {
    expect(orderCheckFor({ topics: { a: 'strict' } }, 'a')).toBe('strict');
    expect(orderCheckFor({ topics: { a: 'strict' } }, 'toString')).toBeUndefined();
    expect(
      orderCheckFor({ topics: (t) => (t.startsWith('x.') ? 'strict' : undefined) }, 'x.y'),
    ).toBe('strict');
    expect(orderCheckFor(undefined, 'a')).toBeUndefined();
  });
});
