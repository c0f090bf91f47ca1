/**
 * `outbox_route_pauses` (migration 014): routes whose destination is down, shared by every
 * dispatcher. A row: the route is paused until `paused_until`; after that ONE dispatcher takes
 * the probe (`probe_owner`, leased until `probe_until`), sends one message, and deletes the row
 * when the destination answers or pushes `paused_until` out by a doubled cooldown when it does
 * not. Times travel as milliseconds relative to the database's `now()` (`untilMs`), so the
 * dispatchers' clocks need not agree with the server's or each other's.
 */
const pauseColumns = `route, reason, failed_probes AS "failedProbes", cooldown_ms AS "cooldownMs",
       paused_at AS "pausedAt", paused_until AS "pausedUntil",
       greatest(0, extract(epoch FROM paused_until - now()) * 1000)::float8 AS "untilMs",
       probe_owner AS "probeOwner",
       CASE WHEN probe_until > now()
            THEN extract(epoch FROM probe_until - now()) * 1000 ELSE 0 END::float8 AS "probeMs"`;

/** Every paused route (a handful of rows at most): read after each claim that found messages. */
export const listRoutePausesSql = (s: string) => `
SELECT ${pauseColumns} FROM ${s}.outbox_route_pauses ORDER BY route`;

/**
 * Pauses a route (or keeps the later of two pauses: two dispatchers finding it down at once).
 * $1 route, $2 reason, $3 pause in ms.
 */
export const pauseRouteSql = (s: string) => `
INSERT INTO ${s}.outbox_route_pauses AS p (route, reason, paused_until, cooldown_ms)
VALUES ($1, $2, now() + $3::float8 * interval '1 millisecond', $3::float8)
ON CONFLICT (route) DO UPDATE
  SET reason = excluded.reason,
      paused_until = greatest(p.paused_until, excluded.paused_until),
      cooldown_ms = greatest(p.cooldown_ms, excluded.cooldown_ms)
RETURNING ${pauseColumns}`;

/**
 * Takes the route's probe: only when the pause is over and no other probe is in flight. The row
 * lock makes it one winner among dispatchers. $1 route, $2 owner, $3 probe lease in ms.
 */
export const takeProbeSql = (s: string) => `
UPDATE ${s}.outbox_route_pauses
SET probe_owner = $2, probe_until = now() + $3::float8 * interval '1 millisecond'
WHERE route = $1
  AND paused_until <= now()
  AND (probe_until IS NULL OR probe_until <= now())
RETURNING route`;

/**
 * The probe failed: pause again for twice the cooldown (capped), or longer if the destination
 * said so (`Retry-After`). $1 route, $2 owner, $3 reason, $4 cap in ms, $5 at least ms.
 */
export const probeFailedSql = (s: string) => `
UPDATE ${s}.outbox_route_pauses
SET failed_probes = failed_probes + 1,
    reason = $3,
    cooldown_ms = least($4::float8, cooldown_ms * 2),
    paused_until = now() + greatest(least($4::float8, cooldown_ms * 2), $5::float8)
                           * interval '1 millisecond',
    probe_owner = NULL,
    probe_until = NULL
WHERE route = $1 AND probe_owner = $2
RETURNING ${pauseColumns}`;

/** The probe never went out (its run stopped before it): let the next claim take one. $1, $2. */
export const dropProbeSql = (s: string) => `
UPDATE ${s}.outbox_route_pauses SET probe_owner = NULL, probe_until = NULL
WHERE route = $1 AND probe_owner = $2`;

/** The destination answered the probe: the route resumes. $1 route, $2 owner. */
export const resumeRouteSql = (s: string) => `
DELETE FROM ${s}.outbox_route_pauses WHERE route = $1 AND probe_owner = $2 RETURNING route`;

/**
 * What the dispatcher reads after a claim that found messages: the paused routes and the
 * rate-limit patterns, in ONE round trip (the common answer is no rows at all).
 */
export const destinationLimitsSql = (s: string) => `
SELECT 'pause' AS kind, ${pauseColumns} FROM ${s}.outbox_route_pauses
UNION ALL
SELECT 'limit', pattern, '', 0, 0, now(), now(), 0, NULL, 0 FROM ${s}.outbox_rate_limits`;
