import { describe, expect, it } from 'vitest';
import { backoffDelayMs, DEFAULT_BACKOFF } from '../../../src/core/backoff.js';
import { redactSecrets } from '../../../src/core/redact.js';

describe('backoffDelayMs', () => {
  it('follows the reference policy: 30 s doubling, capped at 15 min, plus up to 5 s jitter', () => {
    const none = () => 0;
    expect([1, 2, 3, 4, 5, 6, 7].map((n) => backoffDelayMs(n, DEFAULT_BACKOFF, none))).toEqual([
      30_000, 60_000, 120_000, 240_000, 480_000, 900_000, 900_000,
    ]);
    expect(backoffDelayMs(1, DEFAULT_BACKOFF, () => 0.999)).toBe(34_995);
    expect(backoffDelayMs(1000, DEFAULT_BACKOFF, none)).toBe(900_000);
  });
});

describe('redactSecrets', () => {
  it.each([
    ['connect to postgres://app:hunter2@db:5432/x failed', 'hunter2'],
    ['401: Authorization: Bearer abcdefghijklmnop', 'abcdefghijklmnop'],
    ['invalid key sk-ant-api03-abcdefghijklmnopqrstuvwxyz', 'abcdefghijklmnopqrstuvwxyz'],
    ['stripe sk_live_abcdefgh12345678', 'sk_live_abcdefgh12345678'],
    ['aws AKIAABCDEFGHIJKLMNOP', 'AKIAABCDEFGHIJKLMNOP'],
    ['body: password=swordfish&user=a', 'swordfish'],
    ['{"api_key": "k-123456"}', 'k-123456'],
  ])('removes the secret from %j', (text, secret) => {
    const redacted = redactSecrets(text);
    expect(redacted).not.toContain(secret);
    expect(redacted).toContain('[REDACTED]');
  });

  it('truncates long texts', () => {
    const redacted = redactSecrets('x'.repeat(10_000), 100);
    expect(redacted.length).toBeLessThanOrEqual(100);
    expect(redacted).toMatch(/truncated/);
  });
});
