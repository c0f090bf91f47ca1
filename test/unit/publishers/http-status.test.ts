import { describe, expect, it } from 'vitest';
import { classifyStatus, parseRetryAfter } from '../../../src/publishers/http/http-status.js';

describe('classifyStatus', () => {
  it.each([
    [200, 'published'],
    [299, 'published'],
    [302, 'permanent'],
    [400, 'permanent'],
    [404, 'permanent'],
    [408, 'retryable'],
    [413, 'permanent'],
    [429, 'retryable'],
    [499, 'permanent'],
    [500, 'retryable'],
    [599, 'retryable'],
  ] as const)('%i → %s', (status, expected) => {
    expect(classifyStatus(status)).toBe(expected);
  });
});

describe('parseRetryAfter', () => {
  const now = Date.parse('2026-03-01T12:00:00Z');

  it('reads delay-seconds', () => {
    expect(parseRetryAfter('0', now)).toBe(0);
    expect(parseRetryAfter(' 30 ', now)).toBe(30_000);
  });

  it('reads an HTTP date relative to now, never negative', () => {
    expect(parseRetryAfter('Sun, 01 Mar 2026 12:01:30 GMT', now)).toBe(90_000);
    expect(parseRetryAfter('Sun, 01 Mar 2026 11:00:00 GMT', now)).toBe(0);
  });

  it('ignores absent and malformed values', () => {
    for (const value of [null, undefined, '', '-5', '1.5', 'soon', 'Xyz, garbage']) {
      expect(parseRetryAfter(value, now)).toBeUndefined();
    }
  });
});
