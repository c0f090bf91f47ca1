import { describe, expect, it } from 'vitest';
import { subjectCovers, subjectPattern } from '../../../src/publishers/nats/jetstream-stream.js';

describe('subjectPattern', () => {
  it('widens a topic to its first segment', () => {
    expect(subjectPattern('mail.send')).toBe('mail.>');
    expect(subjectPattern('payment.refund.partial')).toBe('payment.>');
    expect(subjectPattern('audit')).toBe('audit');
  });
});

describe('subjectCovers', () => {
  it.each([
    ['>', 'mail.>', true],
    ['>', 'audit', true],
    ['mail.>', 'mail.>', true],
    ['mail.*', 'mail.>', false],
    ['mail.send', 'mail.>', false],
    ['*.>', 'mail.>', true],
    ['mail.>', 'mail', false],
    ['audit', 'audit', true],
    ['*', 'audit', true],
    ['audit', 'audits', false],
    ['mail.>', 'mailer.>', false],
  ] as const)('%s covers %s: %s', (filter, pattern, expected) => {
    expect(subjectCovers(filter, pattern)).toBe(expected);
  });
});
