import type { Migration } from './migration.js';

/**
 * Destinations have limits (issue 27): two small tables every dispatcher reads and writes, so a
 * paused route and a rate limit are ONE state for all dispatchers, not one per process.
 *
 * - `outbox_route_pauses`: a route whose destination is down (every message of it failing
 *   retryable, the circuit breaker open, a `Retry-After`). One row per paused route (the route's
 *   topic pattern, or `*` for a dispatcher with a single publisher); no row: the route works.
 *   `paused_until` is when the next probe may go; `probe_owner`/`probe_until` is the lease of the
 *   one dispatcher sending it, so only one probe is in flight whatever the number of dispatchers;
 *   `cooldown_ms` doubles on each failed probe (up to a cap), `failed_probes` counts them.
 * - `outbox_rate_limits`: a token bucket per topic glob (`payment.*`), declared by dispatchers
 *   (`--rate-limit`, `rateLimits`): `per_second`, `burst` (bucket size), the `tokens` left as of
 *   `refilled_at`; `granted` what the last take got, `taken` the total, and a ten-second window
 *   (`window_at`, `window_taken`, `last_rate`) for the current rate `outbox limits` shows. Claimed messages take tokens right after the claim (sql/rate-limits.ts); what
 *   finds none waits, without an attempt counted.
 *
 * Neither table is read by the claim: messages of a paused or limited route are claimed, then
 * given back at once with their attempt returned and `available_at` moved to when they may go
 * (sql/defer.ts), so each is claimed about once per pause or per slot and the claim's own SQL and
 * its cost are unchanged. Both tables stay tiny (a row per route, a row per limit).
 */
export const destinationLimits: Migration = {
  version: 14,
  name: 'destination-limits',
  up: (s) => [
    `
CREATE TABLE ${s}.outbox_route_pauses (
  route         text PRIMARY KEY,
  reason        text NOT NULL,
  paused_at     timestamptz NOT NULL DEFAULT now(),
  paused_until  timestamptz NOT NULL,
  cooldown_ms   float8 NOT NULL,
  failed_probes int NOT NULL DEFAULT 0,
  probe_owner   text,
  probe_until   timestamptz
)`,
    `
CREATE TABLE ${s}.outbox_rate_limits (
  pattern     text PRIMARY KEY,
  per_second  float8 NOT NULL CHECK (per_second > 0),
  burst       float8 NOT NULL CHECK (burst >= 1),
  tokens      float8 NOT NULL,
  refilled_at timestamptz NOT NULL DEFAULT now(),
  granted     int NOT NULL DEFAULT 0,
  taken       bigint NOT NULL DEFAULT 0,
  window_at   timestamptz NOT NULL DEFAULT now(),
  window_taken bigint NOT NULL DEFAULT 0,
  last_rate   float8 NOT NULL DEFAULT 0,
  created_at  timestamptz NOT NULL DEFAULT now()
)`,
  ],
};
