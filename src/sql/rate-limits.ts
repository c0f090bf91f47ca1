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
const unbounded = `r.tokens + r.per_second * greatest(0, extract(epoch FROM now() - r.refilled_at))`;

/**
 * What the bucket may hold: its burst, but while a backlog waits — slots were handed out past
 * the last take (`queued_until`, see {@link takeTokensSql}) — a quarter of a second's tokens (at
 * least one, at most the burst). Why: a burst is for a quiet destination. With messages waiting
 * on their slots, tokens pile up only when nobody takes them (lanes changing hands between
 * dispatchers, a dispatcher restarting); the late messages then came back together and spent a
 * whole burst at once, on top of the rate (bench `rate_limit_window_max_ratio`: a 5-second
 * window at 1.10 of the limit, its busiest second at the rate plus the burst). The time of such
 * a pause is lost to the limit, as it would be to a caller who paused. A quarter of a second,
 * not one token: several dispatchers take in turn, each for what came due since its last take
 * (a few slots), and a bucket that held one token would refuse those again and again.
 */
const capacity = `CASE WHEN r.queued_until > r.refilled_at
                       THEN least(r.burst, greatest(1, r.per_second / 4))
                       ELSE r.burst END`;

const refilled = `least(${capacity}, ${unbounded})`;

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
      tokens = least(r.tokens, excluded.burst),
      queued_until = CASE WHEN r.per_second = excluded.per_second THEN r.queued_until
                          ELSE '-infinity' END
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
 * Takes up to `wanted` whole tokens from each bucket named. Returns what each got, the tokens
 * left (below 1 when some were refused) and, when some were, `firstInMs`: when (ms after the
 * statement's `now()`) the first refused message may come back, the k-th refused one k slots
 * (1 / per_second) later. The rate window rolls every ten seconds. $1 globs (text[]), $2 wanted
 * (int[], same order).
 *
 * `queued_until` (migration 035) is the end of the slots handed out to refused messages, shared
 * by every dispatcher: the refused ones of this call are placed after it (and not before the
 * bucket's next token), and it moves past them. Why: each dispatcher kept that tail in its own
 * memory, so several dispatchers placed their refused messages on the same slots; at each slot
 * all but one were refused again and went to the end of their own queue, a claim and a deferral
 * more each time (bench `rate_limit_utilisation`'s `outboxRowsWrittenPerMessage`). A slot handed
 * out and then not used (its message published otherwise, its dispatcher killed) costs a token's
 * wait, never more than the limit: a message that comes back still takes its token. And a take
 * that finds the bucket full forgets the slots handed out: had their messages come, each would
 * have taken the token of its slot and the bucket would not have filled (messages replayed,
 * skipped or deleted while they waited; a backlog gone). Full means what it would hold without
 * the backlog's smaller capacity: a burst's time with no take. A limit declared at another rate
 * forgets them too ({@link declareRateLimitsSql}): they were spaced for the old one.
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
                     ELSE r.window_at END,
    queued_until = CASE WHEN w.wanted > floor(${refilled})
      THEN greatest(CASE WHEN ${unbounded} >= r.burst THEN '-infinity' ELSE r.queued_until END,
                    now() + (1 - (${refilled} - floor(${refilled}))) / r.per_second
                            * interval '1 second')
           + (w.wanted - floor(${refilled})) / r.per_second * interval '1 second'
      WHEN ${unbounded} >= r.burst THEN '-infinity'
      ELSE r.queued_until END
FROM unnest($1::text[], $2::int[]) AS w(pattern, wanted)
WHERE r.pattern = w.pattern
RETURNING r.pattern, r.granted, r.tokens AS "left", r.per_second AS "perSecond",
  CASE WHEN w.wanted > r.granted
       THEN extract(epoch FROM r.queued_until - now()) * 1000
            - (w.wanted - r.granted) * 1000 / r.per_second
  END::float8 AS "firstInMs"`;

/** Migration 035: where the slots handed out to refused messages end (see {@link takeTokensSql}). */
export const rateLimitQueueSql = (s: string) => `
ALTER TABLE ${s}.outbox_rate_limits
  ADD COLUMN queued_until timestamptz NOT NULL DEFAULT '-infinity'`;
