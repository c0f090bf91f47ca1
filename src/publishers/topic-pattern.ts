/**
 * Topic patterns, matched segment by segment on `.`:
 * - a literal segment matches itself (`mail.send` matches only `mail.send`);
 * - `*` matches exactly one segment (`mail.*` matches `mail.send`, not `mail` or `mail.a.b`);
 * - `**` matches zero or more segments (`payment.**` matches `payment`, `payment.charge`,
 *   `payment.refund.partial`; `**` alone matches every topic).
 *
 * The same rules as NATS `*`/`>` and AMQP `*`/`#`, so a route reads like the broker binding it
 * feeds. Partial-segment wildcards (`mail.s*`) are not supported: they are rejected, not
 * silently treated as literals.
 */
export type TopicMatcher = (topic: string) => boolean;

/** Compiles a pattern into a matcher. Throws on empty patterns or partial-segment wildcards. */
export function compileTopicPattern(pattern: string): TopicMatcher {
  if (pattern.length === 0) throw new TypeError('topic pattern must not be empty');
  const segments = pattern.split('.');
  for (const segment of segments) {
    if (segment.length === 0)
      throw new TypeError(`topic pattern "${pattern}" has an empty segment`);
    if (segment.includes('*') && segment !== '*' && segment !== '**') {
      throw new TypeError(
        `topic pattern "${pattern}": "*" and "**" must be whole segments (got "${segment}")`,
      );
    }
  }
  if (!pattern.includes('*')) return (topic) => topic === pattern;
  return (topic) => matchSegments(segments, 0, topic.split('.'), 0);
}

function matchSegments(pattern: string[], p: number, topic: string[], t: number): boolean {
  for (; p < pattern.length; p++, t++) {
    const segment = pattern[p];
    if (segment === '**') {
      // Try every possible length for the `**`, shortest first.
      for (let skip = t; skip <= topic.length; skip++) {
        if (matchSegments(pattern, p + 1, topic, skip)) return true;
      }
      return false;
    }
    if (t >= topic.length) return false;
    if (segment !== '*' && segment !== topic[t]) return false;
  }
  return t === topic.length;
}
