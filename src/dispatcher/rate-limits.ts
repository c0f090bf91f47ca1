import { OutboxValidationError } from '../core/errors.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import {
  declareRateLimitsSql,
  listRateLimitsSql,
  removeRateLimitsSql,
} from '../sql/rate-limits.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { globMatches } from './topic-patterns.js';

/**
 * A rate limit on the topics matching `pattern` (a glob as in `unorderedTopics`: `payment.*`),
 * for all dispatchers together: at most `perSecond` messages a second, `burst` at once after a
 * quiet spell (default: one second's worth, at least 1).
 */
export interface RateLimit {
  pattern: string;
  perSecond: number;
  burst?: number;
}

/** A limit as `outbox limits` shows it. */
export interface RateLimitState {
  pattern: string;
  perSecond: number;
  burst: number;
  /** Tokens in the bucket now. */
  tokens: number;
  /** Messages let through since the limit was declared. */
  taken: number;
  /** Messages per second over the current (or last) ten-second window. */
  currentRate: number;
}

/** Checks limits from the API (a clear error naming the bad one; nothing is written). */
export function checkRateLimits(limits: readonly RateLimit[]): Required<RateLimit>[] {
  return limits.map((limit, i) => {
    const name = `rateLimits[${i}]`;
    if (typeof limit?.pattern !== 'string' || limit.pattern.length === 0)
      throw new OutboxValidationError(
        `${name}.pattern`,
        'must be a topic glob such as "payment.*"',
      );
    if (typeof limit.perSecond !== 'number' || !(limit.perSecond > 0) || !isFinite(limit.perSecond))
      throw new OutboxValidationError(`${name}.perSecond`, 'must be a number > 0');
    const burst = limit.burst ?? Math.max(1, limit.perSecond);
    if (typeof burst !== 'number' || !(burst >= 1) || !isFinite(burst))
      throw new OutboxValidationError(`${name}.burst`, 'must be a number >= 1');
    return { pattern: limit.pattern, perSecond: limit.perSecond, burst };
  });
}

/**
 * Parses `--rate-limit 'PATTERN=N/s[:BURST]'` (`payment.*=50/s:100`). Throws a message that says
 * what the flag should look like.
 */
export function parseRateLimitFlag(value: string): RateLimit {
  const match = /^(.+)=(\d+(?:\.\d+)?)\/s(?::(\d+(?:\.\d+)?))?$/.exec(value.trim());
  if (!match)
    throw new Error(
      `--rate-limit "${value}": write PATTERN=N/s or PATTERN=N/s:BURST, e.g. 'payment.*=50/s:100'`,
    );
  const [, pattern, perSecond, burst] = match;
  const limit: RateLimit = { pattern: pattern!.trim(), perSecond: Number(perSecond) };
  if (burst !== undefined) limit.burst = Number(burst);
  checkRateLimits([limit]);
  return limit;
}

/** The limit that governs `topic`: the longest matching pattern (the most specific). */
export function limitFor<T extends { pattern: string }>(
  limits: readonly T[],
  topic: string,
): T | undefined {
  let best: T | undefined;
  for (const limit of limits)
    if (globMatches(limit.pattern, topic) && (!best || limit.pattern.length > best.pattern.length))
      best = limit;
  return best;
}

/**
 * Declares rate limits into the database: ONE limit per pattern for every dispatcher (the last
 * declaration of a pattern wins). Returns the patterns declared.
 *
 * @example
 * ```ts
 * await declareRateLimits(fromPg(pool), [{ pattern: 'payment.*', perSecond: 50, burst: 100 }]);
 * ```
 */
export async function declareRateLimits(
  executor: SqlExecutor,
  limits: readonly RateLimit[],
  options: { schema?: string } = {},
): Promise<string[]> {
  const checked = checkRateLimits(limits);
  if (checked.length === 0) return [];
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const { rows } = await executor.query<{ pattern: string }>(declareRateLimitsSql(schema), [
    checked.map((l) => l.pattern),
    checked.map((l) => l.perSecond),
    checked.map((l) => l.burst),
  ]);
  return rows.map((r) => r.pattern);
}

/** Removes rate limits by pattern; returns the patterns removed. */
export async function removeRateLimits(
  executor: SqlExecutor,
  patterns: readonly string[],
  options: { schema?: string } = {},
): Promise<string[]> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const { rows } = await executor.query<{ pattern: string }>(removeRateLimitsSql(schema), [
    patterns,
  ]);
  return rows.map((r) => r.pattern);
}

/** The limits in force, with their buckets and current rates. */
export async function listRateLimits(
  executor: SqlExecutor,
  options: { schema?: string } = {},
): Promise<RateLimitState[]> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const { rows } = await executor.query<RateLimitState & { taken: string }>(
    listRateLimitsSql(schema),
  );
  return rows.map((r) => ({ ...r, taken: Number(r.taken) }));
}
