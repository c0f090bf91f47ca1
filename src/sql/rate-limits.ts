/**
 * `outbox_rate_limits` (migration 014): one token bucket per topic glob, for every dispatcher
 * together. A dispatcher takes tokens for the messages it just claimed (ONE statement, a row per
 * limit its batch touched); what gets none is deferred (sql/defer.ts) to when the bucket will
 * have refilled for it, without an attempt counted.
 *
 * Why the refill is written out against the row itself and not computed in a subquery: two
 * dispatchers taking from one bucket serialise on its row lock, and under READ COMMITTED the
 * second UPDATE re-evaluates its SET on the row's LATEST version (EvalPlanQual) — a value from
 * a FROM subquery would still be the one its snapshot saw, and both would spend the same tokens.
 */
const refilled = `least(r.burst, r.tokens + r.per_second
                     * greatest(0, extract(epoch FROM now() - r.refilled_at)))`;

/**
 * Declares limits (the last declaration of a pattern wins: one limit per pattern for all).
 * $1 LIKE-free globs (text[]), $2 per second (float8[]), $3 burst (float8[]).
 */
export const declareRateLimitsSql = (s: string) => `
INSERT INTO ${s}.outbox_rate_limits AS r (pattern, per_second, burst, tokens)
SELECT d.pattern, d.per_second, d.burst, d.burst
FROM unnest($1::text[], $2::float8[], $3::float8[]) AS d(pattern, per_second, burst)
ON CONFLICT (pattern) DO UPDATE
  SET per_second = excluded.per_second,
      burst = excluded.burst,
      tokens = least(r.tokens, excluded.burst)
RETURNING pattern`;

/** $1 globs (text[]). */
export const removeRateLimitsSql = (s: string) => `
DELETE FROM ${s}.outbox_rate_limits WHERE pattern = ANY ($1::text[]) RETURNING pattern`;

/**
 * The limits with their bucket as of now and the rate of the current window (or of the last one,
 * while the current one is under a second old).
 */
export const listRateLimitsSql = (s: string) => `
SELECT r.pattern,
       r.per_second AS "perSecond",
       r.burst,
       ${refilled}::float8 AS tokens,
       r.taken::text AS taken,
       CASE WHEN now() - r.window_at >= interval '1 second'
            THEN r.window_taken / extract(epoch FROM now() - r.window_at)
            ELSE r.last_rate END::float8 AS "currentRate"
FROM ${s}.outbox_rate_limits r
ORDER BY r.pattern`;

/**
 * Takes up to `wanted` whole tokens from each bucket named. Returns what each got and the tokens
 * left (below 1 when some were refused), so the caller can tell the k-th refused message when a
 * token will be there for it: (k + 1 - left) / per_second. The rate window rolls every ten
 * seconds. $1 globs (text[]), $2 wanted (int[], same order).
 */
export const takeTokensSql = (s: string) => `
UPDATE ${s}.outbox_rate_limits r
SET granted = least(w.wanted, floor(${refilled}))::int,
    tokens = ${refilled} - least(w.wanted, floor(${refilled})),
    refilled_at = now(),
    taken = r.taken + least(w.wanted, floor(${refilled}))::int,
    last_rate = CASE WHEN now() - r.window_at >= interval '10 seconds'
                     THEN r.window_taken / extract(epoch FROM now() - r.window_at)
                     ELSE r.last_rate END,
    window_taken = CASE WHEN now() - r.window_at >= interval '10 seconds' THEN 0
                        ELSE r.window_taken END + least(w.wanted, floor(${refilled}))::int,
    window_at = CASE WHEN now() - r.window_at >= interval '10 seconds' THEN now()
                     ELSE r.window_at END
FROM unnest($1::text[], $2::int[]) AS w(pattern, wanted)
WHERE r.pattern = w.pattern
RETURNING r.pattern, r.granted, r.tokens AS "left", r.per_second AS "perSecond"`;
