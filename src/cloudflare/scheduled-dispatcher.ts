import { DEFAULT_BACKOFF, type BackoffOptions } from '../core/backoff.js';
import { OutboxValidationError } from '../core/errors.js';
import type { DeadLetterPolicy } from '../dispatcher/options.js';
import { publishInOrder, type MessageFate } from '../dispatcher/ordered-publish.js';
import type { Settlement } from '../dispatcher/outbox-store.js';
import { planSettlement } from '../dispatcher/settle-plan.js';
import type { OutgoingMessage, Publisher } from '../publishers/publisher.js';
import { addD1UnorderedTopics, repairD1HeadsIfDue } from './chains.js';
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
  /**
   * Topic globs (`audit.*`) whose messages take no part in their aggregate's order. Declared in
   * `outbox_unordered_topics` before the first claim (see `addD1UnorderedTopics`), so they apply to
   * messages WRITTEN from then on, whichever dispatcher sends them: order is decided when a
   * message is written, never by one dispatcher's view at claim time. Default none (removing a
   * glob here does not undeclare it: use `removeD1UnorderedTopics`).
   */
  unorderedTopics?: readonly string[];
  /** `hold` (default): a dead letter blocks its aggregate's later ordered messages; `skip`: not. */
  deadLetterPolicy?: DeadLetterPolicy;
  /**
   * At most this often (shared by every dispatcher of the database through `outbox_maintenance`),
   * a run first marks unmarked aggregate heads ready (`repairD1Heads`): only needed after an
   * upgrade across D1 migration 2 during which older Workers kept settling. 0: never. Default
   * 3 600 000 (an hour).
   */
  repairIntervalMs?: number;
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
  /**
   * Claimed but never sent, given back without an attempt counted: the rest of an ordered run
   * after its first failure (issue 16).
   */
  released: number;
  /** Settlements that matched nothing because another run re-claimed the row (expired lease). */
  fenced: number;
  /** `drained`: nothing due was left; `time-budget`: stopped with work possibly left. */
  stoppedBy: 'drained' | 'time-budget';
  /** Heads the periodic repair marked ready (see `repairIntervalMs`); usually 0. */
  repairedHeads: number;
}

/** A dispatcher for a Worker's `scheduled()` handler. */
export interface ScheduledDispatcher {
  /** Claims, sends and settles batches until nothing is due or the time budget is spent. */
  run(): Promise<DispatchRunSummary>;
}

/** @internal Shared with the Durable Object's options. */
export function positiveInteger(
  name: string,
  value: number | undefined,
  fallback: number,
  { allowZero = false } = {},
): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < 0 || (v === 0 && !allowZero))
    throw new OutboxValidationError(name, `must be a positive integer, got ${String(v)}`);
  return v;
}

/**
 * Creates the D1 → Queues dispatcher: the Postgres polling dispatcher's claim → publish → settle
 * cycle (lease with a per-claim token; claims of ready heads and the runs behind them; attempts
 * counted at claim; each aggregate's run published in order (`publishInOrder`, the Node dispatcher's own),
 * stopping at its first failure; fenced settle; backoff and dead letters via the shared
 * `planSettlement`), looped within a time budget because a Cron Trigger fires at most once a
 * minute — one batch per minute would cap throughput at `batchSize`/min. The Durable Object
 * dispatcher (`OutboxDispatcherObject`) runs the same cycle.
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
  const repairIntervalMs = positiveInteger(
    'repairIntervalMs',
    options.repairIntervalMs,
    3_600_000,
    { allowZero: true },
  );
  const policy = options.deadLetterPolicy ?? 'hold';
  if (policy !== 'hold' && policy !== 'skip')
    throw new OutboxValidationError('deadLetterPolicy', `must be "hold" or "skip"`);
  const backoff: BackoffOptions = { ...DEFAULT_BACKOFF, ...options.backoff };
  const now = options.now ?? Date.now;
  const db = options.db;
  const store = new D1OutboxStore(db, now);
  const unorderedTopics = [...(options.unorderedTopics ?? [])];
  const planning = { maxAttempts, backoff, ...(options.random ? { random: options.random } : {}) };
  let declared: Promise<unknown> | undefined;
  let repairCheckedAt = -Infinity;

  const settlementOf = (message: OutgoingMessage, fate: MessageFate): Settlement => {
    switch (fate.kind) {
      case 'outcome':
        return planSettlement(message, fate.outcome, planning);
      case 'shadow':
        return { rowId: message.rowId, kind: 'shadow' };
      case 'unsent':
        return { rowId: message.rowId, kind: 'release' };
      case 'exhausted':
        // As in the Postgres dispatcher: claimed more often than allowed without ever settling
        // (earlier runs died mid-send): dead-letter instead of crash-looping.
        return {
          rowId: message.rowId,
          kind: 'dead',
          error: `gave up after ${message.attempts - 1} attempts that never settled (Worker crash or lease expiry)`,
        };
    }
  };

  return {
    async run() {
      const started = now();
      const summary: DispatchRunSummary = {
        batches: 0,
        claimed: 0,
        published: 0,
        retried: 0,
        deadLettered: 0,
        released: 0,
        fenced: 0,
        stoppedBy: 'time-budget',
        repairedHeads: 0,
      };
      // Once per dispatcher (a Cron invocation, or a Durable Object's lifetime); retried by the
      // next run if it fails.
      declared ??= addD1UnorderedTopics(db, unorderedTopics, now).catch((error: unknown) => {
        declared = undefined;
        throw error;
      });
      await declared;
      // The repair's schedule lives in D1; look at it at most once a minute per dispatcher.
      if (repairIntervalMs > 0 && started - repairCheckedAt >= Math.min(repairIntervalMs, 60_000)) {
        repairCheckedAt = started;
        summary.repairedHeads = (await repairD1HeadsIfDue(db, repairIntervalMs, started)) ?? 0;
      }
      while (now() - started < timeBudgetMs) {
        // A fresh token per claim, not per run: settle is fenced on it (see src/sql/sqlite/settle.ts).
        const owner = crypto.randomUUID();
        const messages = await store.claim({
          owner,
          batchSize,
          leaseMs,
          deadLettersBlock: policy === 'hold',
        });
        if (messages.length === 0) {
          summary.stoppedBy = 'drained';
          break;
        }
        summary.batches += 1;
        summary.claimed += messages.length;
        // Each aggregate's run in sequence order, stopping at its first failure; abandoned well
        // before the lease runs out, so no other run can claim these messages while a send might
        // still be delivering them (G3). Real time: the lease is judged by D1 rows, not by `now`.
        const fates = await publishInOrder(publisher, messages, {
          maxAttempts,
          deadline: Date.now() + leaseMs - Math.max(500, leaseMs * 0.1),
          timeoutError: `publish did not finish within the lease (${leaseMs} ms)`,
        });
        const settlements = messages.map((m, i) => settlementOf(m, fates[i]!));
        // If this throws, the messages stay leased and are sent again after the lease: at least
        // once (G2), same message ids. The error fails the invocation, visibly.
        const settled = new Set(
          (await store.settle(owner, settlements, { deadLettersBlock: policy === 'hold' })).settled,
        );
        for (const settlement of settlements) {
          if (!settled.has(settlement.rowId)) summary.fenced += 1;
          else if (settlement.kind === 'published' || settlement.kind === 'shadow')
            summary.published += 1;
          else if (settlement.kind === 'retry') summary.retried += 1;
          else if (settlement.kind === 'release') summary.released += 1;
          else summary.deadLettered += 1;
        }
      }
      return summary;
    },
  };
}
