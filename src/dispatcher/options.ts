import { DEFAULT_BACKOFF, type BackoffOptions } from '../core/backoff.js';
import { OutboxValidationError } from '../core/errors.js';
import { DEFAULT_SCHEMA } from '../core/identifier.js';
import type { Publisher } from '../publishers/publisher.js';
import type { CommitMode } from '../sql/commit-mode.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import type { RoutePauseOptions } from './destination-limits.js';
import type { OutboxStore } from './outbox-store.js';
import { checkRateLimits, type RateLimit } from './rate-limits.js';
import type { WakeSource } from './wake-source.js';

/** What happens to later messages of an aggregate whose ordered message was dead-lettered. */
export type DeadLetterPolicy = 'hold' | 'skip';

/**
 * Which claim the dispatcher asks for (claim-shape.ts): `auto` (default) takes runs first while
 * the publisher's calls return in under half a millisecond (or it sends a run in one call) and
 * there are runs to take, heads first otherwise; `heads-first` always spreads a batch over as many
 * aggregates as it holds (lowest latency per aggregate for a slow, one-message-per-call
 * destination); `runs-first` always takes a few aggregates' heads with the runs behind them.
 */
export type ClaimShapeOption = 'auto' | 'heads-first' | 'runs-first';

/** Options of {@link createDispatcher}. Every duration is in milliseconds. */
export interface DispatcherOptions {
  /**
   * Which engine to run (issue 43): `'claims'` (the `outbox` table, leased and settled per
   * message) or `'lanes'` (the lanes engine, docs/lanes.md: the same options, its own defaults
   * where they differ, batch 500 and poll 200 ms; `store`, `asyncSettle`, `asyncClaim` and a
   * `claimShape` other than `auto` are refused). Default: the engine the schema records
   * (migration 036, `outbox engine`), read at `start()` or `drain()` — the claim engine with a
   * `store`, or on a schema from before migration 036.
   */
  engine?: 'claims' | 'lanes';
  /**
   * Where to run SQL: `fromPg(pool)` (a pool is fine: every statement stands alone). Give either
   * this or `store`.
   */
  executor?: SqlExecutor;
  /** A custom store (tests wrap PgOutboxStore to inject failures). */
  store?: OutboxStore;
  /** Schema of the outbox tables. Default `public`. */
  schema?: string;
  publisher: Publisher;
  /** Messages claimed per batch. Default 200. */
  batchSize?: number;
  /**
   * How long a claim is exclusive. A dispatcher that dies holds its messages this long; a publish
   * is abandoned (as retryable) before the lease runs out, so no two dispatchers publish the same
   * message at the same time. Default 30 000.
   */
  leaseMs?: number;
  /** Wait before claiming again after a claim found nothing due. Default 1 000. */
  pollIntervalMs?: number;
  /** Retry delays: `{ baseMs: 30 000, maxMs: 900 000, jitterMs: 5 000 }` by default. */
  backoff?: Partial<BackoffOptions>;
  /** Attempts before a message is dead-lettered. Default 10. */
  maxAttempts?: number;
  /**
   * Topic globs that need no per-aggregate order (`mail.*`). Every other topic is ordered per
   * aggregate. Default none.
   */
  unorderedTopics?: readonly string[];
  /** `hold` (default): a dead letter blocks its aggregate's later ordered messages; `skip` lets them go. */
  deadLetterPolicy?: DeadLetterPolicy;
  /** Batches in flight at once (claim → publish → settle pipelines). Default 1. */
  concurrency?: number;
  /** Wakes the dispatcher early when work arrives (LISTEN/NOTIFY, CDC). Polling stays on. */
  wakeSource?: WakeSource;
  /** Identifies this dispatcher in leases and logs. Default `host:pid:random`. */
  id?: string;
  /**
   * Commit settles (and releases) without waiting for the WAL flush. Default `false`. For servers
   * whose flush is slow (network disks): the loop then no longer waits a flush per batch. A
   * Postgres crash may lose the last few hundred milliseconds of settles; those messages are
   * published again after their lease expires, with the same message id. Claims always wait for
   * the flush unless `asyncClaim` is set, and producers' and consumers' transactions are never
   * affected. No measurable effect where a flush takes ~0.35 ms (docs/latency.md, "Commit mode").
   */
  asyncSettle?: boolean;
  /**
   * Commit claims without waiting for the WAL flush: one flush fewer between a message's commit
   * and its publish. Default `false`. A claim lost in a Postgres crash would free its messages
   * while their publish may still be in flight, so after a crash recovery (and after a new
   * cluster's first start) no claim takes anything for `leaseMs`: the messages of lost claims are
   * then published again, once, with the same message id. Set it, and the same `leaseMs`, on every
   * dispatcher of the outbox (docs/latency.md, "Commit mode").
   */
  asyncClaim?: boolean;
  /**
   * A claim, settle or release not answered within this many ms fails (the executor gives up on
   * it and drops its connection: `fromPg` on a pool does). Without it a statement on a
   * connection that a network partition froze — nothing closed, no error — waits for as long as
   * the operating system keeps the socket, and the dispatcher with it. A timed-out claim is
   * retried with backoff; a timed-out settle is retried while the lease lasts and is then like
   * any failed settle: the lease expires and the message goes out again, same message id.
   * Default 10 000; `0` turns it off. Keep it well under `leaseMs`, and above the slowest claim
   * you expect (they take milliseconds).
   *
   * @example
   * ```ts
   * createDispatcher({ executor: fromPg(pool), publisher, statementTimeoutMs: 5_000 });
   * ```
   */
  statementTimeoutMs?: number;
  /**
   * Rate limits per topic glob, declared into the database when the dispatcher starts: ONE limit
   * for all dispatchers together (docs/destination-limits.md). A message over its limit waits,
   * without an attempt counted; ordered messages keep their order.
   *
   * @example
   * ```ts
   * createDispatcher({
   *   executor: fromPg(pool),
   *   publisher,
   *   rateLimits: [{ pattern: 'payment.*', perSecond: 50, burst: 100 }],
   * });
   * ```
   */
  rateLimits?: readonly RateLimit[];
  /**
   * When a route counts as down and how long it pauses (docs/destination-limits.md). A paused
   * route's messages wait without attempts; one probe per pause tells when it is back.
   */
  routePause?: RoutePauseOptions;
  /**
   * Heads first or runs first (see {@link ClaimShapeOption}). Default `auto`. Either way every
   * aggregate's messages go out in order; only how a batch is filled changes.
   */
  claimShape?: ClaimShapeOption;
}

/** Default of {@link DispatcherOptions.statementTimeoutMs}. */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 10_000;

/** Options after defaults, checked. */
export interface ResolvedDispatcherOptions {
  schema: string;
  batchSize: number;
  leaseMs: number;
  pollIntervalMs: number;
  backoff: BackoffOptions;
  maxAttempts: number;
  unorderedTopics: readonly string[];
  deadLetterPolicy: DeadLetterPolicy;
  concurrency: number;
  /** How settles and releases commit (sql/commit-mode.ts). */
  settleCommit: CommitMode;
  /** How claims commit (sql/commit-mode.ts `claimCommitClause`). */
  claimCommit: CommitMode;
  /** 0: no timeout. */
  statementTimeoutMs: number;
  rateLimits: Required<RateLimit>[];
  routePause: Required<RoutePauseOptions>;
  claimShape: ClaimShapeOption;
}

function positiveInteger(name: string, value: number | undefined, fallback: number): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v <= 0)
    throw new OutboxValidationError(name, `must be a positive integer, got ${String(v)}`);
  return v;
}

function nonNegative(name: string, value: number | undefined, fallback: number): number {
  const v = value ?? fallback;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0)
    throw new OutboxValidationError(name, `must be a finite number >= 0, got ${String(v)}`);
  return v;
}

/** `asyncSettle` → the settle's commit mode; synchronous unless asked otherwise. */
export function settleCommit(asyncSettle: boolean | undefined): CommitMode {
  return commitMode('asyncSettle', asyncSettle);
}

/** `asyncSettle` or `asyncClaim` → a commit mode; synchronous unless asked otherwise. */
function commitMode(name: string, value: boolean | undefined): CommitMode {
  if (value !== undefined && typeof value !== 'boolean')
    throw new OutboxValidationError(name, `must be true or false, got ${JSON.stringify(value)}`);
  return value ? 'async' : 'sync';
}

export function resolveDispatcherOptions(options: DispatcherOptions): ResolvedDispatcherOptions {
  const backoff: BackoffOptions = {
    baseMs: nonNegative('backoff.baseMs', options.backoff?.baseMs, DEFAULT_BACKOFF.baseMs),
    maxMs: nonNegative('backoff.maxMs', options.backoff?.maxMs, DEFAULT_BACKOFF.maxMs),
    jitterMs: nonNegative('backoff.jitterMs', options.backoff?.jitterMs, DEFAULT_BACKOFF.jitterMs),
  };
  const shape = options.claimShape ?? 'auto';
  if (shape !== 'auto' && shape !== 'heads-first' && shape !== 'runs-first')
    throw new OutboxValidationError(
      'claimShape',
      `must be "auto", "heads-first" or "runs-first", got ${JSON.stringify(shape)}`,
    );
  const policy = options.deadLetterPolicy ?? 'hold';
  if (policy !== 'hold' && policy !== 'skip')
    throw new OutboxValidationError(
      'deadLetterPolicy',
      `must be "hold" or "skip", got "${String(policy)}"`,
    );
  return {
    schema: options.schema ?? DEFAULT_SCHEMA,
    batchSize: positiveInteger('batchSize', options.batchSize, 200),
    leaseMs: positiveInteger('leaseMs', options.leaseMs, 30_000),
    pollIntervalMs: positiveInteger('pollIntervalMs', options.pollIntervalMs, 1_000),
    backoff,
    maxAttempts: positiveInteger('maxAttempts', options.maxAttempts, 10),
    unorderedTopics: [...(options.unorderedTopics ?? [])],
    deadLetterPolicy: policy,
    concurrency: positiveInteger('concurrency', options.concurrency, 1),
    settleCommit: settleCommit(options.asyncSettle),
    claimCommit: commitMode('asyncClaim', options.asyncClaim),
    statementTimeoutMs: nonNegative(
      'statementTimeoutMs',
      options.statementTimeoutMs,
      DEFAULT_STATEMENT_TIMEOUT_MS,
    ),
    rateLimits: checkRateLimits(options.rateLimits ?? []),
    routePause: {
      afterFailures: positiveInteger(
        'routePause.afterFailures',
        options.routePause?.afterFailures,
        5,
      ),
      initialMs: positiveInteger('routePause.initialMs', options.routePause?.initialMs, 1_000),
      maxMs: positiveInteger('routePause.maxMs', options.routePause?.maxMs, 60_000),
    },
    claimShape: shape,
  };
}
