import { DEFAULT_BACKOFF, type BackoffOptions } from '../core/backoff.js';
import { OutboxValidationError } from '../core/errors.js';
import type { DeadLetterPolicy } from '../dispatcher/options.js';
import type { Settlement } from '../dispatcher/outbox-store.js';
import { planSettlement } from '../dispatcher/settle-plan.js';
import { errorText, type PublishOutcome, type Publisher } from '../publishers/publisher.js';
import { D1OutboxStore } from './d1-outbox-store.js';
import type { D1Db, QueueProducer } from './d1-types.js';
import { CloudflareQueuesPublisher } from './queues-publisher.js';

/** Options of {@link createScheduledDispatcher}. Durations in milliseconds. */
export interface ScheduledDispatcherOptions {
  /** The D1 binding holding the outbox (`env.DB`). */
  db: D1Db;
  /** The Queue producer binding (`env.QUEUE`). Give this or `publisher`. */
  queue?: QueueProducer;
  /** Any publisher instead of a Queue (an HTTP webhook publisher, a test double). */
  publisher?: Publisher;
  /** Messages per claim. Default 100: one `sendBatch` when envelopes are small. */
  batchSize?: number;
  /**
   * How long a claim keeps other runs away. Must outlive one send + settle; after it, another run
   * may send the message again (same id, so consumers dedupe). Default 60 000.
   */
  leaseMs?: number;
  /**
   * Stop claiming new batches after this long; the batch in flight is finished. Cron invocations
   * may run for minutes, but keep it under the 1-minute cron interval so runs rarely overlap
   * (overlap is safe, just wasteful). Default 25 000.
   */
  timeBudgetMs?: number;
  /** Attempts before a message is dead-lettered. Default 10. */
  maxAttempts?: number;
  /** Retry backoff. Default base 30 s, max 15 min, jitter 5 s (as in Postgres). */
  backoff?: Partial<BackoffOptions>;
  /** Topic globs (`audit.*`) published without per-aggregate ordering. Default none. */
  unorderedTopics?: readonly string[];
  /** `hold` (default): a dead letter blocks its aggregate's later ordered messages; `skip`: not. */
  deadLetterPolicy?: DeadLetterPolicy;
  /** Clock in ms since the epoch. Default `Date.now`. */
  now?: () => number;
  /** Random source for backoff jitter. Default `Math.random`. */
  random?: () => number;
}

/** What one {@link ScheduledDispatcher.run} did. */
export interface DispatchRunSummary {
  /** Claims that returned messages. */
  batches: number;
  claimed: number;
  published: number;
  retried: number;
  deadLettered: number;
  /** Settlements that matched nothing because another run re-claimed the row (expired lease). */
  fenced: number;
  /** `drained`: nothing due was left; `time-budget`: stopped with work possibly left. */
  stoppedBy: 'drained' | 'time-budget';
}

/** A dispatcher for a Worker's `scheduled()` handler. */
export interface ScheduledDispatcher {
  /** Claims, sends and settles batches until nothing is due or the time budget is spent. */
  run(): Promise<DispatchRunSummary>;
}

function positiveInteger(name: string, value: number | undefined, fallback: number): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v <= 0)
    throw new OutboxValidationError(name, `must be a positive integer, got ${String(v)}`);
  return v;
}

/**
 * Creates the D1 → Queues dispatcher: the Postgres polling dispatcher's claim → publish → settle
 * cycle (lease with a per-claim token, head-only claims on ordered topics, attempts counted at
 * claim, fenced settle, backoff and dead letters via the shared `planSettlement`), looped within
 * a time budget because a Cron Trigger fires at most once a minute — one batch per minute would
 * cap throughput at `batchSize`/min.
 *
 * @example
 * ```ts
 * export default {
 *   async scheduled(_controller, env, ctx) {
 *     ctx.waitUntil(createScheduledDispatcher({ db: env.DB, queue: env.QUEUE }).run());
 *   },
 * };
 * ```
 */
export function createScheduledDispatcher(
  options: ScheduledDispatcherOptions,
): ScheduledDispatcher {
  const publisher =
    options.publisher ?? (options.queue ? new CloudflareQueuesPublisher(options.queue) : undefined);
  if (!publisher)
    throw new OutboxValidationError('queue', 'give the Queue binding (env.QUEUE) or a publisher');
  const batchSize = positiveInteger('batchSize', options.batchSize, 100);
  const leaseMs = positiveInteger('leaseMs', options.leaseMs, 60_000);
  const timeBudgetMs = positiveInteger('timeBudgetMs', options.timeBudgetMs, 25_000);
  const maxAttempts = positiveInteger('maxAttempts', options.maxAttempts, 10);
  const policy = options.deadLetterPolicy ?? 'hold';
  if (policy !== 'hold' && policy !== 'skip')
    throw new OutboxValidationError('deadLetterPolicy', `must be "hold" or "skip"`);
  const backoff: BackoffOptions = { ...DEFAULT_BACKOFF, ...options.backoff };
  const now = options.now ?? Date.now;
  const store = new D1OutboxStore(options.db, now);
  const unorderedPatterns = [...(options.unorderedTopics ?? [])];

  return {
    async run() {
      const started = now();
      const summary: DispatchRunSummary = {
        batches: 0,
        claimed: 0,
        published: 0,
        retried: 0,
        deadLettered: 0,
        fenced: 0,
        stoppedBy: 'time-budget',
      };
      while (now() - started < timeBudgetMs) {
        // A fresh token per claim, not per run: settle is fenced on it (see settle-sql.ts).
        const owner = crypto.randomUUID();
        const messages = await store.claim({
          owner,
          batchSize,
          leaseMs,
          unorderedPatterns,
          deadLettersBlock: policy === 'hold',
        });
        if (messages.length === 0) {
          summary.stoppedBy = 'drained';
          break;
        }
        summary.batches += 1;
        summary.claimed += messages.length;
        let outcomes: PublishOutcome[];
        try {
          outcomes = await publisher.publish(messages);
        } catch (error) {
          // The Publisher contract: a throw means every message of the call is retryable.
          outcomes = messages.map(() => ({ status: 'retryable', error: errorText(error) }));
        }
        const settlements: Settlement[] = messages.map((message, index) =>
          planSettlement(
            message,
            outcomes[index] ?? { status: 'retryable', error: 'publisher returned no outcome' },
            { maxAttempts, backoff, ...(options.random ? { random: options.random } : {}) },
          ),
        );
        // If this throws, the messages stay leased and are sent again after the lease: at least
        // once (G2), same message ids. The error fails the invocation, visibly.
        const settled = new Set(
          (await store.settle(owner, settlements, { deadLettersBlock: policy === 'hold', leaseMs }))
            .settled,
        );
        for (const settlement of settlements) {
          if (!settled.has(settlement.rowId)) {
            summary.fenced += 1;
            continue;
          }
          if (settlement.kind === 'published') summary.published += 1;
          else if (settlement.kind === 'retry') summary.retried += 1;
          else summary.deadLettered += 1;
        }
      }
      return summary;
    },
  };
}
