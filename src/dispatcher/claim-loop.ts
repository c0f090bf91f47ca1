import { toError } from '../core/errors.js';
import type { OutgoingMessage, Publisher } from '../publishers/publisher.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import type { BatchSettler } from './batch-settler.js';
import { startBatchTrace, traceClaimFailure } from './dispatch-spans.js';
import type { DispatcherStats } from './dispatcher-stats.js';
import type { DispatcherEventMap, TypedEmitter } from './events.js';
import type { IdleTracker } from './idle-tracker.js';
import type { ResolvedDispatcherOptions } from './options.js';
import { ClaimShape } from './claim-shape.js';
import { publishInOrder } from './ordered-publish.js';
import type { OutboxStore } from './outbox-store.js';
import { declareRateLimits } from './rate-limits.js';
import { prepareClaims } from './repair-heads.js';
import type { RouteGate } from './route-gate.js';
import { addUnorderedTopics } from './unordered-topics.js';
import type { WakeUps } from './wake-ups.js';

const CLAIM_RETRY_MAX_MS = 30_000;

/** What a {@link ClaimLoop} works with: the dispatcher's parts and a view of its lifecycle. */
export interface ClaimLoopParts {
  /** The dispatcher's id: lease owners are `<id>#<claim number>`. */
  id: string;
  options: ResolvedDispatcherOptions;
  store: OutboxStore;
  publisher: Publisher;
  /** Runs the once-per-dispatcher preparation (see #prepare); absent with a bare store. */
  executor: SqlExecutor | undefined;
  /** The dispatcher's counters, updated in place. */
  stats: DispatcherStats;
  events: TypedEmitter<DispatcherEventMap>;
  idle: IdleTracker;
  wakeUps: WakeUps;
  routes: RouteGate;
  settler: BatchSettler;
  /** True while the dispatcher is `running`. */
  running: () => boolean;
  /** True once `stop()` was called on a running dispatcher (state `stopping`). */
  stopping: () => boolean;
}

/** A loop's settle in flight (see {@link ClaimLoop.runBatch}). `BatchSettler.settle` never rejects. */
export interface Pipeline {
  settling: Promise<void>;
  /** A settle was handed off since the last empty claim. */
  pending: boolean;
}

/** A loop's pipeline before its first hand-off: nothing settling. */
export function newPipeline(): Pipeline {
  return { settling: Promise.resolve(), pending: false };
}

/**
 * After an empty claim: if a settle was handed off since, waits for it and returns true (claim
 * again: it may have made an ordered successor due). False: nothing is in flight.
 */
export async function settleBehind(pipeline: Pipeline): Promise<boolean> {
  if (!pipeline.pending) return false;
  pipeline.pending = false;
  await pipeline.settling;
  return true;
}

/**
 * The claim → publish → settle cycle of a dispatcher: {@link run} is one of its `concurrency`
 * loops, {@link runBatch} one cycle (what `drain()` repeats). State shared by the loops lives
 * here: the claim counter, the claim failures in a row that set the retry delay, and the
 * preparation before the first claim.
 */
export class ClaimLoop {
  readonly #parts: ClaimLoopParts;
  #claimNumber = 0;
  #consecutiveClaimFailures = 0;
  #prepared: Promise<void> | undefined;
  /** Heads first or runs first (claim-shape.ts), from how fast the publisher's calls return. */
  readonly #shape: ClaimShape;

  constructor(parts: ClaimLoopParts) {
    this.#parts = parts;
    this.#shape = new ClaimShape(
      parts.options.batchSize,
      parts.publisher.ordersWithinCall === true,
      parts.options.claimShape,
    );
  }

  /** One loop, until the dispatcher stops running; its last settle is awaited. */
  async run(): Promise<void> {
    const pipeline = newPipeline();
    try {
      await this.#runWith(pipeline);
    } finally {
      await pipeline.settling;
    }
  }

  async #runWith(pipeline: Pipeline): Promise<void> {
    const { running, wakeUps, options } = this.#parts;
    while (running()) {
      const claimed = await this.runBatch({ throwClaimErrors: false, pipeline });
      if (!running()) break;
      if (claimed === 0 && (await settleBehind(pipeline))) continue;
      if (
        wakeUps.hasSource &&
        this.#consecutiveClaimFailures === 0 &&
        (await wakeUps.afterClaim(claimed))
      )
        continue;
      // Claim again at once after any work: settling a head makes its successor due now, and a
      // poll-interval pause per ordered message would add up. Sleep only on an empty claim.
      if (claimed === 0) {
        const wait =
          this.#consecutiveClaimFailures > 0 ? this.#claimRetryDelay() : options.pollIntervalMs;
        // A message deferred for a rate-limit token comes due with no write to announce it.
        await wakeUps.sleep(Math.min(wait, this.#parts.routes.nextTokenInMs() ?? wait));
      }
    }
  }

  #claimRetryDelay(): number {
    return Math.min(CLAIM_RETRY_MAX_MS, 250 * 2 ** Math.min(this.#consecutiveClaimFailures, 10));
  }

  /**
   * Once, before the first claim (retried with the next claim if it fails):
   * - `unorderedTopics` (and `--unordered`) are declared in `outbox_unordered_topics`, so they
   *   apply to messages WRITTEN from then on, for every dispatcher — order is no longer a
   *   per-dispatcher view at claim time (two dispatchers with different lists would send one
   *   aggregate out of order);
   * - heads left unmarked by a dispatcher older than migration 009 are marked ready, during the
   *   seven days after an upgrade across it (repair-heads.ts `prepareClaims`).
   */
  async #prepare(): Promise<void> {
    const { executor, options } = this.#parts;
    if (!executor) return;
    try {
      const globs = options.unorderedTopics;
      if (globs.length > 0) await addUnorderedTopics(executor, globs, { schema: options.schema });
      if (options.rateLimits.length > 0)
        await declareRateLimits(executor, options.rateLimits, {
          schema: options.schema,
        });
      await prepareClaims(executor, { schema: options.schema });
    } catch (error) {
      this.#prepared = undefined;
      throw error;
    }
  }

  /**
   * One claim → publish → settle cycle. Returns how many messages were claimed.
   *
   * The settle is handed to `pipeline` and not awaited: the next claim runs while this batch's
   * settle commits (on another connection of the pool), so a message committed meanwhile waits
   * for one statement, not two (issue 7, latency). The batch's rows stay leased until the settle
   * commits, so the overlapping claim skips them, and an ordered successor becomes due only
   * then. At most one settle per loop is outstanding: the next hand-off waits for the last.
   */
  async runBatch({
    throwClaimErrors,
    pipeline,
  }: {
    throwClaimErrors: boolean;
    pipeline: Pipeline;
  }): Promise<number> {
    const { id, options, store, stats, events, idle } = this.#parts;
    const owner = `${id}#${++this.#claimNumber}`;
    idle.begin();
    try {
      const started = Date.now();
      let messages: OutgoingMessage[];
      try {
        await (this.#prepared ??= this.#prepare());
        messages = await store.claim({
          owner,
          batchSize: options.batchSize,
          leaseMs: options.leaseMs,
          deadLettersBlock: options.deadLetterPolicy === 'hold',
          maxHeads: this.#shape.maxHeads(),
        });
        this.#consecutiveClaimFailures = 0;
        this.#shape.noteClaim(messages);
      } catch (error) {
        this.#consecutiveClaimFailures++;
        stats.claimFailures++;
        const err = toError(error);
        traceClaimFailure(id, owner, started, err);
        events.emit('dispatcher:claim:failure', {
          error: err,
          retryInMs: this.#claimRetryDelay(),
        });
        if (throwClaimErrors) throw err;
        return 0;
      }
      const leaseDeadline = started + options.leaseMs;
      // An empty claim while a settle is in flight proves nothing: that settle may make an
      // ordered successor due (the loop claims again once it is done).
      idle.noteClaim(messages.length === 0 && !pipeline.pending);
      events.emit('dispatcher:claim:success', {
        owner,
        count: messages.length,
        durationMs: Date.now() - started,
      });
      if (messages.length === 0) return 0;
      stats.batches++;
      stats.claimed += messages.length;
      // Undefined without an OpenTelemetry SDK: then no span work at all (dispatch-spans.ts).
      const batch = startBatchTrace(id, owner, messages, started);

      if (this.#parts.stopping()) {
        // Nothing was handed to the publisher yet: give the messages back right away.
        await store
          .release(
            owner,
            messages.map((m) => m.rowId),
          )
          .catch(() => undefined);
        batch?.end(messages.map((m) => ({ rowId: m.rowId, kind: 'release' })));
        return 0;
      }

      // Publish runs in order (ordered-publish.ts); abandon publishing well before the lease runs
      // out, so no other dispatcher can claim these messages while a publish might still be
      // delivering them (G3).
      // Paused routes and rate limits (issue 27): what may not go now is given back, unpublished.
      const gate = await this.#gate(owner, messages);
      if (!gate) {
        batch?.end(messages.map((m) => ({ rowId: m.rowId, kind: 'release' })));
        return 0;
      }
      const sending = gate.send;
      const fates = await publishInOrder(this.#parts.publisher, sending, {
        maxAttempts: options.maxAttempts,
        deadline: leaseDeadline - Math.max(500, options.leaseMs * 0.1),
        timeoutError: `publish did not finish within the lease (${options.leaseMs} ms)`,
        trace: batch,
        onOutcomes: (sent, outcomes, durationMs) => {
          this.#shape.noteCall(durationMs);
          sent.forEach((message, i) =>
            events.emit('dispatcher:publish:outcome', {
              message,
              outcome: outcomes[i]!,
              durationMs,
            }),
          );
        },
      });
      const { settler } = this.#parts;
      const settlements = sending.map((m, i) => settler.settlementOf(m, fates[i]!));
      await this.#parts.routes.review(owner, sending, fates, settlements, gate);
      await pipeline.settling;
      idle.begin();
      pipeline.pending = true;
      const settle = () =>
        settler.settle(owner, settlements, messages, leaseDeadline, batch?.spanContext);
      pipeline.settling = (batch ? batch.within(settle) : settle()).finally(() => {
        this.#parts.routes.deferred(gate);
        idle.end();
        batch?.end(settlements);
      });
      return messages.length;
    } finally {
      idle.end();
    }
  }

  /**
   * The claim's messages split by {@link RouteGate.gate}. If the gate cannot be read, the claim
   * is given back (attempts too) and counted as a failed claim: publishing past a limit nobody
   * could check is what it exists to prevent.
   */
  async #gate(owner: string, messages: OutgoingMessage[]) {
    try {
      return await this.#parts.routes.gate(owner, messages);
    } catch (error) {
      await this.#parts.store
        .release(
          owner,
          messages.map((m) => m.rowId),
        )
        .catch(() => undefined);
      this.#consecutiveClaimFailures++;
      this.#parts.stats.claimFailures++;
      this.#parts.events.emit('dispatcher:claim:failure', {
        error: toError(error),
        retryInMs: this.#claimRetryDelay(),
      });
      return undefined;
    }
  }
}
