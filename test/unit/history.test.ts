import { describe, expect, it } from 'vitest';
import { checkHistory } from '../helpers/history.js';

// The checker guards every delivery test, so it gets tests of its own: each kind of violation
// must be caught.
const expected = [
  { messageId: 'a1', aggregateId: 'a', sequence: 1, ordered: true },
  { messageId: 'a2', aggregateId: 'a', sequence: 2, ordered: true },
  { messageId: 'm1', aggregateId: 'a', sequence: 3, ordered: false },
];

describe('checkHistory', () => {
  it('passes a clean history', () => {
    const report = checkHistory(expected, [
      { messageId: 'a1', publisher: 'd1', start: 1, end: 2 },
      { messageId: 'm1', publisher: 'd2', start: 1, end: 2 },
      { messageId: 'a2', publisher: 'd2', start: 3, end: 4 },
    ]);
    expect(report).toEqual({
      lost: [],
      unexpected: [],
      orderViolations: [],
      concurrentDuplicates: [],
      duplicates: 0,
    });
  });

  it('finds lost, out-of-order, concurrent and duplicate deliveries', () => {
    const report = checkHistory(expected, [
      { messageId: 'a2', publisher: 'd1', start: 1, end: 5 },
      { messageId: 'a1', publisher: 'd1', start: 2, end: 3 },
      { messageId: 'a1', publisher: 'd2', start: 2.5, end: 4 },
      { messageId: 'zz', publisher: 'd2', start: 6, end: 7 },
    ]);
    expect(report.lost).toEqual(['m1']);
    expect(report.unexpected).toEqual(['zz']);
    expect(report.orderViolations).toEqual([{ aggregateId: 'a', sequence: 1, next: 2 }]);
    expect(report.concurrentDuplicates).toEqual([{ messageId: 'a1', publishers: ['d1', 'd2'] }]);
    expect(report.duplicates).toBe(1);
  });
});
