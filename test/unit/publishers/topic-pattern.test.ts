import { describe, expect, it } from 'vitest';
import { compileTopicPattern } from '../../../src/publishers/topic-pattern.js';

const cases: [string, string, boolean][] = [
  ['mail.send', 'mail.send', true],
  ['mail.send', 'mail.sent', false],
  ['mail.send', 'mail.send.x', false],
  ['mail.*', 'mail.send', true],
  ['mail.*', 'mail', false],
  ['mail.*', 'mail.send.bulk', false],
  ['*.send', 'mail.send', true],
  ['payment.**', 'payment', true],
  ['payment.**', 'payment.charge', true],
  ['payment.**', 'payment.refund.partial', true],
  ['payment.**', 'payments.charge', false],
  ['**', 'anything.at.all', true],
  ['a.**.z', 'a.z', true],
  ['a.**.z', 'a.b.c.z', true],
  ['a.**.z', 'a.b.c', false],
  ['a.*.*', 'a.b.c', true],
  ['a.*.*', 'a.b', false],
];

describe('compileTopicPattern', () => {
  it.each(cases)('%s matches %s: %s', (pattern, topic, expected) => {
    expect(compileTopicPattern(pattern)(topic)).toBe(expected);
  });

  it('rejects partial-segment wildcards and empty segments', () => {
    for (const bad of ['', 'mail.s*', 'mail..send', '***', 'a.*b']) {
      expect(() => compileTopicPattern(bad)).toThrow(TypeError);
    }
  });
});
