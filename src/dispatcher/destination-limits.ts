import { quoteIdentifier } from '../core/identifier.js';
import type { OutgoingMessage } from '../publishers/publisher.js';
import { takeTokensSql } from '../sql/rate-limits.js';
import {
  dropProbeSql,
  destinationLimitsSql,
  pauseRouteSql,
  probeFailedSql,
  resumeRouteSql,
  takeProbeSql,
} from '../sql/route-pauses.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import type { MessageFate } from './ordered-publish.js';
import type { Settlement } from './outbox-store.js';
import { limitFor } from './rate-limits.js';
import { heldBehind } from './route-order.js';

/** When a route counts as down, and how long it then pauses (see {@link DestinationLimits}). */
export interface RoutePauseOptions {
  /** Consecutive messages of a route failing `retryable`, none published, that pause it. Default 5. */
  afterFailures?: number;
  /** First pause, in ms; doubles after each failed probe. Default 1 000. */
  initialMs?: number;
  /** Longest pause between probes, in ms. Default 60 000. */
  maxMs?: number;
}

interface Pause {
  route: string;
  reason: string;
  untilMs: number;
  probeMs: number;
}

/** The start of the reason of a deferral for want of a token. */
const RATE_LIMIT = 'rate limit';

/** How long messages of a route wait while its probe is out (claimed again after this). */
const PROBE_WAIT_MS = 250;

/** How long one read of the paused routes and limits is used (see `#read`). */
const READ_EVERY_MS = 100;
/**
 * Up to this age a read older than {@link READ_EVERY_MS} is still used while a new one runs in
 * the background; beyond it (a read that keeps failing) the gate waits for a read (see `#read`).
 */
const STALE_MAX_MS = 1_000;

/**
 * Destination health and rate limits, applied around the claim (issue 27), for every dispatcher
 * together through two tables (migration 014). The claim's SQL is untouched: after a claim that
 * found messages, the dispatcher reads the paused routes and the limits (a few rows), and
 *
 * - a message of a paused route is deferred to the end of the pause (sql/defer.ts: no attempt,
 *   out of the due range until then); once the pause is over, ONE dispatcher takes the route's
 *   probe and sends one message; the others' messages wait {@link PROBE_WAIT_MS} more;
 * - a message under a rate limit takes a token (sql/rate-limits.ts); without one it is deferred
 *   to when the bucket will have one for it;
 * - what an ordered message deferred this way had behind it in its run is released (it waits
 *   behind it in its chain, as behind a failure).
 *
 * After the publish, a route whose messages all failed `retryable` `afterFailures` times in a
 * row, or that answered with a `Retry-After` (a 429 or 503, or the circuit breaker failing fast),
 * is paused: its failed messages of this batch are deferred instead of retried, so an outage
 * costs them no attempt and no dead letter. A probe that gets an answer (published, or a
 * `permanent` refusal: the destination is up) resumes the route; one that fails pauses it again
 * for twice as long, up to `maxMs`.
 */
export class DestinationLimits {
  readonly #executor: SqlExecutor;
  readonly #schema: string;
  readonly #routeOf: (topic: string) => string;
  readonly #afterFailures: number;
  readonly #initialMs: number;
  readonly #maxMs: number;
  readonly #leaseMs: number;
  /** Consecutive failed messages per route, since its last published one (this process). */
  readonly #failures = new Map<string, number>();
  #cache: { at: number; pauses: Pause[]; limits: { pattern: string }[] } | undefined;
  /** Bumped when this dispatcher's own change makes the cache wrong: older reads are dropped. */
  #generation = 0;
  /** The read refreshing a stale cache in the background, if one runs. */
  #refreshing: Promise<void> | undefined;
  /**
   * When (epoch ms) the messages this dispatcher deferred for want of a token come due, the past
   * ones dropped at each look. Each deferred message is one its deferrer wakes for.
   */
  #tokenDue: number[] = [];

  constructor(options: {
    executor: SqlExecutor;
    schema: string;
    routeOf: (topic: string) => string;
    pause: RoutePauseOptions;
    leaseMs: number;
  }) {
    this.#executor = options.executor;
    this.#schema = quoteIdentifier(options.schema);
    this.#routeOf = options.routeOf;
    this.#afterFailures = options.pause.afterFailures ?? 5;
    this.#initialMs = options.pause.initialMs ?? 1_000;
    this.#maxMs = options.pause.maxMs ?? 60_000;
    this.#leaseMs = options.leaseMs;
  }

  routeOf(topic: string): string {
    return this.#routeOf(topic);
  }

  /**
   * Notes when the messages of `held` deferred for a token come due, once their deferral is
   * committed: `available_at` counts from the settle's `now()`, which can be a publish later than
   * the gate (a wake-up timed from the gate claimed too early, found nothing and slept the poll
   * interval out).
   */
  deferred(held: readonly Settlement[]): void {
    const now = Date.now();
    // The past ones go here too: a loop that never finds its claim empty never asks.
    this.#tokenDue = this.#tokenDue.filter((at) => at > now);
    for (const s of held)
      if (s.kind === 'defer' && s.reason.startsWith(RATE_LIMIT))
        this.#tokenDue.push(now + s.delayMs);
  }

  /**
   * Milliseconds until the first message this dispatcher deferred for want of a token is due
   * (undefined: none waits). An idle loop sleeps no longer than this: with LISTEN/NOTIFY the poll
   * interval is 5 s, and nothing announces a deferred message coming due — three `outbox
   * dispatch` processes that slept it out left the bucket idle and spent 64 % of a 50/s limit
   * (issue 43, bench `rate_limit_utilisation`).
   */
  nextTokenInMs(): number | undefined {
    const now = Date.now();
    this.#tokenDue = this.#tokenDue.filter((at) => at > now);
    if (this.#tokenDue.length === 0) return undefined;
    return this.#tokenDue.reduce((a, b) => Math.min(a, b)) - now;
  }

  /**
   * Splits a claim into what goes out now and what is given back (deferred or released), taking
   * probes and tokens. `probes`: the route → message this claim probes with.
   */
  async gate(
    owner: string,
    messages: readonly OutgoingMessage[],
  ): Promise<{
    send: OutgoingMessage[];
    held: Settlement[];
    probes: Map<string, OutgoingMessage>;
  }> {
    const { pauses, limits } = await this.#read();
    // An aggregate's earlier messages first, so a probe or a token never goes to a message whose
    // predecessor in the batch then waits (it would be released behind it, heldBehind).
    const inOrder = [...messages].sort((a, b) => a.sequence - b.sequence);
    const held = new Map<OutgoingMessage, Settlement>();
    const probes = new Map<string, OutgoingMessage>();
    const defer = (m: OutgoingMessage, delayMs: number, reason: string) =>
      held.set(m, { rowId: m.rowId, kind: 'defer', delayMs, reason });
    if (pauses.length > 0) {
      const byRoute = new Map(pauses.map((p) => [p.route, p]));
      const lost = new Map<string, number>();
      for (const m of inOrder) {
        const route = this.#routeOf(m.topic);
        const pause = byRoute.get(route);
        if (!pause || m.shadow) continue;
        if (pause.untilMs > 0) defer(m, pause.untilMs, `route ${route} paused: ${pause.reason}`);
        else if (probes.has(route) || lost.has(route))
          defer(m, Math.max(PROBE_WAIT_MS, lost.get(route) ?? 0), `route ${route} probing`);
        else if (await this.#takeProbe(route, owner)) probes.set(route, m);
        else {
          lost.set(route, pause.probeMs);
          defer(m, Math.max(PROBE_WAIT_MS, pause.probeMs), `route ${route} probing`);
        }
      }
    }
    heldBehind(messages, held);
    if (limits.length > 0) await this.#takeTokens(inOrder, limits, held, defer);
    heldBehind(messages, held);
    for (const [route, probe] of probes)
      if (held.has(probe)) {
        probes.delete(route);
        await this.#executor.query(dropProbeSql(this.#schema), [route, owner]);
      }
    return {
      send: messages.filter((m) => !held.has(m)),
      held: [...held.values()],
      probes,
    };
  }

  /**
   * After the publish: counts each route's failures, pauses routes found down, resumes or
   * re-pauses probed ones, and turns the settlements of messages that failed only because their
   * destination was down into deferrals. `sent[i]` had fate `fates[i]` and settlement `plan[i]`.
   */
  async review(
    owner: string,
    sent: readonly OutgoingMessage[],
    fates: readonly MessageFate[],
    plan: Settlement[],
    probes: Map<string, OutgoingMessage>,
  ): Promise<{ resumed: string[]; paused: { route: string; reason: string }[] }> {
    const routes = new Map<
      string,
      {
        published: number;
        failed: number[];
        /** The failed ones whose destination asked to wait (a Retry-After). */
        throttled: number[];
        retryAfterMs?: number;
        error?: string;
        answered: boolean;
      }
    >();
    sent.forEach((m, i) => {
      const fate = fates[i]!;
      if (fate.kind !== 'outcome') return;
      const route = this.#routeOf(m.topic);
      const r = routes.get(route) ?? { published: 0, failed: [], throttled: [], answered: false };
      routes.set(route, r);
      const outcome = fate.outcome;
      if (outcome.status === 'published') r.published++;
      if (outcome.status !== 'retryable') r.answered = true;
      else {
        r.failed.push(i);
        r.error ??= outcome.error;
        if (outcome.retryAfterMs !== undefined) {
          r.throttled.push(i);
          r.retryAfterMs = Math.max(r.retryAfterMs ?? 0, outcome.retryAfterMs);
        }
      }
    });
    const resumed: string[] = [];
    const paused: { route: string; reason: string }[] = [];
    const deferFailed = (r: { failed: number[] }, delayMs: number, reason: string) => {
      for (const i of r.failed) plan[i] = { rowId: sent[i]!.rowId, kind: 'defer', delayMs, reason };
    };
    // A probe that never went out (its run stopped before it, or time ran out): free it at once
    // rather than let the route wait for its lease.
    for (const route of probes.keys())
      if (
        !routes.has(route) ||
        (!routes.get(route)!.answered && routes.get(route)!.failed.length === 0)
      )
        await this.#executor.query(dropProbeSql(this.#schema), [route, owner]);
    for (const [route, r] of routes) {
      const reason = r.retryAfterMs !== undefined ? `Retry-After: ${r.error}` : `${r.error}`;
      if (probes.has(route)) {
        if (r.answered) {
          this.#failures.set(route, 0);
          const { rows } = await this.#executor.query(resumeRouteSql(this.#schema), [route, owner]);
          if (rows.length > 0) resumed.push(route);
        } else if (r.failed.length > 0) {
          const { rows } = await this.#executor.query<Pause>(probeFailedSql(this.#schema), [
            route,
            owner,
            reason,
            this.#maxMs,
            r.retryAfterMs ?? 0,
          ]);
          deferFailed(
            r,
            rows[0]?.untilMs ?? this.#initialMs,
            `route ${route} still down: ${reason}`,
          );
        }
        continue;
      }
      if (r.published > 0) {
        this.#failures.set(route, 0);
        if (r.retryAfterMs === undefined) continue;
        // The destination worked for part of the batch and then asked to wait (a 429 part-way,
        // a broker that blocked publishers after the first confirms): it stopped working, so
        // what it turned away is deferred uncharged (G9) and the route pauses as it asked.
        // Messages of the same batch that failed without a Retry-After stay charged.
        const { rows } = await this.#executor.query<Pause>(pauseRouteSql(this.#schema), [
          route,
          reason,
          Math.max(this.#initialMs, r.retryAfterMs),
        ]);
        paused.push({ route, reason });
        deferFailed(
          { failed: r.throttled },
          rows[0]?.untilMs ?? r.retryAfterMs,
          `route ${route} paused: ${reason}`,
        );
        continue;
      }
      if (r.failed.length === 0) continue;
      const failures = (this.#failures.get(route) ?? 0) + r.failed.length;
      this.#failures.set(route, failures);
      if (r.retryAfterMs === undefined && failures < this.#afterFailures) continue;
      // As long as a Retry-After says, even past maxMs: the destination asked for it.
      const pauseMs = Math.max(this.#initialMs, r.retryAfterMs ?? 0);
      const { rows } = await this.#executor.query<Pause>(pauseRouteSql(this.#schema), [
        route,
        reason,
        pauseMs,
      ]);
      this.#failures.set(route, 0);
      paused.push({ route, reason });
      deferFailed(r, rows[0]?.untilMs ?? pauseMs, `route ${route} paused: ${reason}`);
    }
    // This dispatcher's own pauses and resumes count at its next claim, not a read later.
    if (probes.size > 0 || paused.length > 0) {
      this.#cache = undefined;
      this.#generation++;
    }
    return { resumed, paused };
  }

  /**
   * The paused routes and limit patterns, read at most every {@link READ_EVERY_MS} (another
   * dispatcher's pause is seen that much and one read later at most; this one's own changes at
   * once).
   */
  async #read(): Promise<{ pauses: Pause[]; limits: { pattern: string }[] }> {
    const cache = this.#cache;
    const age = cache ? Date.now() - cache.at : Infinity;
    if (cache && age < READ_EVERY_MS) return cache;
    // Stale but recent: used as it is while one read refreshes it, off the claim's path. Waiting
    // for it put a round trip between a claim and its publish every READ_EVERY_MS, and in the
    // slowest 5 % of notify latency (issue 43, bench/cases/latency-breakdown.ts). Another
    // dispatcher's pause is then seen at most READ_EVERY_MS and one read later; this one's own
    // changes still count at once (no cache, below).
    if (cache && age < STALE_MAX_MS) {
      if (!this.#refreshing)
        this.#refreshing = this.#fetch()
          .then(
            () => undefined,
            () => undefined, // the next gate tries again; past STALE_MAX_MS it waits and fails
          )
          .finally(() => (this.#refreshing = undefined));
      return cache;
    }
    return await this.#fetch();
  }

  /** One read of the paused routes and limits, kept unless the cache was dropped meanwhile. */
  async #fetch(): Promise<{ pauses: Pause[]; limits: { pattern: string }[] }> {
    const generation = this.#generation;
    const { rows } = await this.#executor.query<Pause & { kind: string }>(
      destinationLimitsSql(this.#schema),
    );
    const read = {
      at: Date.now(),
      pauses: rows.filter((r) => r.kind === 'pause'),
      limits: rows.filter((r) => r.kind === 'limit').map((r) => ({ pattern: r.route })),
    };
    // A read that started before this dispatcher paused or resumed a route may not show it.
    if (generation === this.#generation) this.#cache = read;
    return read;
  }

  async #takeProbe(route: string, owner: string): Promise<boolean> {
    const { rows } = await this.#executor.query(takeProbeSql(this.#schema), [
      route,
      owner,
      this.#leaseMs,
    ]);
    return rows.length > 0;
  }

  async #takeTokens(
    messages: readonly OutgoingMessage[],
    limits: readonly { pattern: string }[],
    held: Map<OutgoingMessage, Settlement>,
    defer: (m: OutgoingMessage, delayMs: number, reason: string) => void,
  ): Promise<void> {
    const wanting = new Map<string, OutgoingMessage[]>();
    for (const m of messages) {
      if (held.has(m) || m.shadow) continue;
      const limit = limitFor(limits, m.topic);
      if (!limit) continue;
      wanting.set(limit.pattern, [...(wanting.get(limit.pattern) ?? []), m]);
    }
    if (wanting.size === 0) return;
    const patterns = [...wanting.keys()];
    const { rows } = await this.#executor.query<{
      pattern: string;
      granted: number;
      perSecond: number;
      firstInMs: number | null;
    }>(takeTokensSql(this.#schema), [patterns, patterns.map((p) => wanting.get(p)!.length)]);
    for (const row of rows) {
      const waiting = wanting.get(row.pattern)!.slice(Number(row.granted));
      if (waiting.length === 0) continue;
      // The k-th message without a token goes k slots after the first slot the bucket handed
      // out for this call: after every slot handed out before, by any dispatcher (sql/rate-
      // limits.ts `takeTokensSql`). Placed from the next token each time, a message refused
      // again landed among the ones it had just been refused with, and each claim took back and
      // deferred again most of the backlog (77 row writes per delivered message with three
      // dispatchers, bench `rate_limit_utilisation`); placed after a tail of its own dispatcher,
      // three dispatchers used the same slots and left others idle.
      const slotMs = 1000 / Number(row.perSecond);
      const first = Math.max(0, Number(row.firstInMs ?? 0));
      waiting.forEach((m, k) => defer(m, first + k * slotMs, `${RATE_LIMIT} ${row.pattern}`));
    }
  }
}
