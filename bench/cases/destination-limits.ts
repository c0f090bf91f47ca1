import { createDispatcher, fromPg, type Publisher } from '../../src/index.js';
import type { BenchDatabase } from '../lib/database.js';
import { seedPending } from '../lib/database.js';
import { log } from '../lib/measure.js';
import { fairShare, fairShareRow } from './fair-share.js';
import { lanesFairShare, lanesFairShareRow } from './lanes-fair-share.js';
import { rateLimitWindows } from './rate-limit-windows.js';

/**
 * Issue 27's cases: a rate limit shared by three dispatchers, an outage that must cost no dead
 * letter, and a tenant's trickle beside another's burst (fair-share.ts). Each on a database of its
 * own; runnable alone with
 * `npm run bench -- --only rate_limit_accuracy,outage_dead_letters,fair_share_p95_ms` (and
 * `rate_limit_window_max_ratio`, rate-limit-windows.ts).
 */

/** A publisher that accepts at once and counts (the limit, not the sink, sets the pace). */
function countingPublisher(): Publisher & { published: number } {
  const p = {
    published: 0,
    publish: async (messages: readonly unknown[]) => {
      p.published += messages.length;
      return messages.map(() => ({ status: 'published' as const }));
    },
  };
  return p;
}

/**
 * `rate_limit_accuracy`: three dispatchers (one pool each, as three processes would have) drain a
 * backlog under ONE limit of 100/s (burst 10) for `seconds`; the measured rate — messages after
 * the first burst, over the window — divided by the limit. Target: within 10 % (0.9–1.1).
 */
export async function rateLimitAccuracy(db: BenchDatabase, seconds: number) {
  const perSecond = 100;
  const burst = 10;
  await seedPending(db.pool, perSecond * seconds * 2, { topic: 'payment.charge', aggregates: 500 });
  const publisher = countingPublisher();
  const dispatchers = [0, 1, 2].map(() =>
    createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      pollIntervalMs: 20,
      rateLimits: [{ pattern: 'payment.*', perSecond, burst }],
    }),
  );
  const started = performance.now();
  dispatchers.forEach((d) => d.start());
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const published = publisher.published;
  const elapsed = (performance.now() - started) / 1000;
  await Promise.all(dispatchers.map((d) => d.stop()));
  const measured = (published - burst) / elapsed;
  const { rows } = await db.pool.query<{ attempts: number }>(
    'SELECT coalesce(max(attempts), 0)::int AS attempts FROM outbox',
  );
  log(`rate limit: ${measured.toFixed(1)}/s measured against ${perSecond}/s, 3 dispatchers`);
  return {
    ratio: Math.round((measured / perSecond) * 1000) / 1000,
    perSecond,
    burst,
    seconds: Math.round(elapsed * 10) / 10,
    published,
    maxAttempts: rows[0]!.attempts,
  };
}

/**
 * `outage_dead_letters`: a destination down (every publish `retryable`, as a 503) for ten attempt
 * budgets of a compressed clock (3 attempts, 100–200 ms backoff: one budget ≈ 0.3 s), then up;
 * two dispatchers. Dead letters once everything is delivered. Target: 0.
 */
export async function outageDeadLetters(db: BenchDatabase) {
  const maxAttempts = 3;
  const backoff = { baseMs: 100, maxMs: 200, jitterMs: 0 };
  const budgetMs = 100 + 200 + 200;
  const outageMs = 10 * budgetMs;
  const messages = 1_000;
  await seedPending(db.pool, messages, { topic: 'payment.charge', aggregates: 50 });
  let down = true;
  let calls = 0;
  let delivered = 0;
  const publisher: Publisher = {
    publish: async (batch) => {
      calls += batch.length;
      if (down) return batch.map(() => ({ status: 'retryable', error: 'HTTP 503' }));
      delivered += batch.length;
      return batch.map(() => ({ status: 'published' }));
    },
  };
  const dispatchers = [0, 1].map(() =>
    createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      pollIntervalMs: 20,
      maxAttempts,
      backoff,
      routePause: { afterFailures: 5, initialMs: 200, maxMs: 1_000 },
    }),
  );
  dispatchers.forEach((d) => d.start());
  await new Promise((resolve) => setTimeout(resolve, outageMs));
  const callsDuringOutage = calls;
  down = false;
  const back = performance.now();
  const deadline = Date.now() + 120_000;
  for (;;) {
    const { rows } = await db.pool.query<{ pending: number; dead: number }>(
      `SELECT count(*) FILTER (WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL)::int AS pending,
              count(*) FILTER (WHERE dead_lettered_at IS NOT NULL)::int AS dead
       FROM outbox`,
    );
    if (rows[0]!.pending === 0 || Date.now() > deadline) {
      await Promise.all(dispatchers.map((d) => d.stop()));
      const recoverySeconds = Math.round((performance.now() - back) / 100) / 10;
      log(
        `outage: ${rows[0]!.dead} dead letters, ${delivered} delivered, ${callsDuringOutage} publishes during ${outageMs} ms down`,
      );
      return {
        deadLetters: rows[0]!.dead,
        pendingLeft: rows[0]!.pending,
        delivered,
        messages,
        outageMs,
        publishesDuringOutage: callsDuringOutage,
        recoverySeconds,
      };
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** The cases, each on a fresh database; `names` selects (null: all). */
export async function destinationLimitsCases(
  fresh: <T>(suffix: string, fn: (db: BenchDatabase) => Promise<T>) => Promise<T>,
  quick: boolean,
  names: Set<string> | null,
) {
  const rate =
    !names || names.has('rate_limit_accuracy')
      ? await fresh('rate', (d) => rateLimitAccuracy(d, quick ? 10 : 30))
      : null;
  // On the engine a new schema runs on (lanes, since session 33); the claim engine's in details.
  const windows =
    !names || names.has('rate_limit_window_max_ratio') || names.has('rate_limit_utilisation')
      ? await fresh('ratewin', (d) => rateLimitWindows(d, quick ? 750 : 1_500, 'lanes'))
      : null;
  const windowsClaims = windows
    ? await fresh('ratewin_claims', (d) => rateLimitWindows(d, quick ? 750 : 1_500, 'claims'))
    : null;
  const outage =
    !names || names.has('outage_dead_letters')
      ? await fresh('outage', (d) => outageDeadLetters(d))
      : null;
  const fair =
    !names || names.has('fair_share_p95_ms')
      ? await fairShare(fresh, quick ? 10_000 : 30_000)
      : null;
  const lanesFair =
    !names || names.has('lanes_fair_share_p95_ms')
      ? await lanesFairShare(fresh, quick ? 10_000 : 30_000, quick)
      : null;
  return {
    keys: {
      rate_limit_accuracy: rate?.ratio ?? null,
      rate_limit_window_max_ratio: windows?.windowMaxRatio ?? null,
      rate_limit_utilisation: windows?.utilisation ?? null,
      outage_dead_letters: outage?.deadLetters ?? null,
      fair_share_p95_ms: fair?.p95 ?? null,
      lanes_fair_share_p95_ms: lanesFair?.p95 ?? null,
    },
    details: {
      rateLimit: rate,
      rateLimitWindows: windows && { ...windows, claims: windowsClaims },
      outage,
      fairShare: fair,
      lanesFairShare: lanesFair,
    },
  };
}

/** The rows of main.ts's table for {@link destinationLimitsCases}' keys. */
export function destinationLimitsRows(r: Record<string, unknown>): string[] {
  const d = r.details as {
    rateLimit: Awaited<ReturnType<typeof rateLimitAccuracy>> | null;
    rateLimitWindows:
      | (Awaited<ReturnType<typeof rateLimitWindows>> & {
          claims: Awaited<ReturnType<typeof rateLimitWindows>> | null;
        })
      | null;
    outage: Awaited<ReturnType<typeof outageDeadLetters>> | null;
  };
  const w = d.rateLimitWindows;
  const row = (key: string, baseline: string, target: string) =>
    `| ${key} | ${r[key] === null || r[key] === undefined ? 'n/a' : String(r[key])} | ${baseline} | ${target} |`;
  return [
    row(
      'rate_limit_accuracy',
      d.rateLimit
        ? `${d.rateLimit.published} published in ${d.rateLimit.seconds} s by 3 dispatchers under ${d.rateLimit.perSecond}/s (burst ${d.rateLimit.burst})`
        : 'not run',
      '0.9–1.1',
    ),
    row(
      'rate_limit_window_max_ratio',
      w
        ? `busiest 5 s after the first burst, ${w.delivered} delivered by ${w.dispatchers} under ${w.perSecond}/s (burst ${w.burst}); with the start ${w.windowMaxRatioWithStart}, busiest second ${w.busiestSecond} (lanes engine)${w.claims ? `; claim engine ${w.claims.windowMaxRatio}` : ''}`
        : 'not run',
      '≤ 1.1',
    ),
    row(
      'rate_limit_utilisation',
      w
        ? `${w.delivered} in ${w.seconds} s; rows written per message: lanes tables ${w.outboxRowsWrittenPerMessage}, bucket ${w.bucketRowsWrittenPerMessage} (lanes engine)${w.claims ? `; claim engine ${w.claims.utilisation} (${w.claims.seconds} s; rows a message: outbox ${w.claims.outboxRowsWrittenPerMessage}, bucket ${w.claims.bucketRowsWrittenPerMessage})` : ''}`
        : 'not run',
      '≥ 0.9',
    ),
    row(
      'outage_dead_letters',
      d.outage
        ? `${d.outage.delivered} of ${d.outage.messages} delivered after ${d.outage.outageMs} ms down (10 attempt budgets), ${d.outage.publishesDuringOutage} publishes meanwhile`
        : 'not run',
      '0',
    ),
    fairShareRow(r),
    lanesFairShareRow(r),
  ];
}
