import type { SpanContext } from '@opentelemetry/api';
import { toError } from '../core/errors.js';
import type { OutgoingMessage } from '../publishers/publisher.js';
import type { DispatcherStats } from './dispatcher-stats.js';
import type { DispatcherEventMap, TypedEmitter } from './events.js';
import type { IdleTracker } from './idle-tracker.js';
import type { MessageFate } from './ordered-publish.js';
import type { ResolvedDispatcherOptions } from './options.js';
import type { OutboxStore, Settlement } from './outbox-store.js';
import { planSettlement } from './settle-plan.js';

/** What a {@link BatchSettler} works with: the dispatcher's store, counters and events. */
export interface BatchSettlerParts {
  options: ResolvedDispatcherOptions;
  store: OutboxStore;
  /** The dispatcher's counters, updated in place. */
  stats: DispatcherStats;
  events: TypedEmitter<DispatcherEventMap>;
  idle: IdleTracker;
  /** Ends the loops' sleeps: a deferred settle that went through may have made a successor due. */
  wake: () => void;
  /** When `stop()` was called; undefined while the dispatcher is created or running. */
  stopRequestedAt: () => number | undefined;
}

/**
 * The settle step of a batch: each message's fate turned into a settlement, the store's settle
 * retried while the lease lasts, the counters and events of what it settled, and the retries of
 * settles the store deferred (a writer of the aggregate was mid-transaction), which keep their
 * lease until they go through.
 */
export class BatchSettler {
  readonly #parts: BatchSettlerParts;
  /** Retries of deferred settles (see #retryDeferred). */
  readonly #deferredSettles = new Set<Promise<void>>();

  constructor(parts: BatchSettlerParts) {
    this.#parts = parts;
  }

  /** True while a deferred settle is still being retried. */
  get deferring(): boolean {
    return this.#deferredSettles.size > 0;
  }

  /** Waits for the deferred settles running now (more may start meanwhile). */
  async deferredSettled(): Promise<void> {
    await Promise.all([...this.#deferredSettles]);
  }

  /** Waits until no deferred settle is left, including those that start meanwhile. */
  async allDeferredSettled(): Promise<void> {
    while (this.#deferredSettles.size > 0) await Promise.all([...this.#deferredSettles]);
  }

  /** How a message is settled after its publish (or after none, see ordered-publish.ts). */
  settlementOf(message: OutgoingMessage, fate: MessageFate): Settlement {
    const rowId = message.rowId;
    switch (fate.kind) {
      case 'outcome':
        return planSettlement(message, fate.outcome, this.#parts.options);
      case 'shadow':
        return { rowId, kind: 'shadow' };
      case 'unsent':
        return { rowId, kind: 'release' };
      case 'exhausted':
        // Claimed more often than allowed without ever settling: earlier attempts died
        // mid-publish (crash, kill -9, OOM). Dead-letter instead of crash-looping on a poison
        // message.
        return {
          rowId,
          kind: 'dead',
          error: `gave up after ${message.attempts - 1} attempts that never settled (dispatcher crash or lease expiry)`,
        };
    }
  }

  /**
   * Settles, retrying while we still hold the lease. Settlements the store defers (sql/settle.ts:
   * a writer of the aggregate is mid-transaction) are handed to {@link #retryDeferred}, off this
   * loop's pipeline: a long transaction of one aggregate must not hold up the others. Never
   * rejects.
   */
  async settle(
    owner: string,
    settlements: Settlement[],
    messages: OutgoingMessage[],
    leaseDeadline: number,
    /** The batch span's, when traced: carried by the events (their log lines name the trace). */
    spanContext?: SpanContext,
  ): Promise<void> {
    const { events, stats } = this.#parts;
    const started = Date.now();
    for (let attempt = 0; ; attempt++) {
      try {
        const { settled, fenced, deferred } = await this.#applySettle(owner, settlements, messages);
        events.emit('dispatcher:settle:success', {
          owner,
          settled,
          fenced,
          durationMs: Date.now() - started,
          ...(spanContext && { spanContext }),
        });
        if (deferred.length > 0) {
          stats.deferred += deferred.length;
          this.#retryDeferred(owner, deferred, messages);
        }
        return;
      } catch (error) {
        // Retry while we still hold the lease: a settled message is one less duplicate later.
        const delay = 200 * 2 ** attempt;
        if (Date.now() + delay >= leaseDeadline) {
          stats.settleFailures++;
          events.emit('dispatcher:settle:failure', {
            owner,
            error: toError(error),
            messages: settlements.length,
            ...(spanContext && { spanContext }),
          });
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }

  /** One store settle: counts what it settled and fenced; returns what it deferred. */
  async #applySettle(owner: string, settlements: Settlement[], messages: OutgoingMessage[]) {
    const result = await this.#parts.store.settle(owner, settlements, this.#settleRequest());
    this.#count(settlements, new Set(result.settled), messages);
    const deferredIds = new Set(result.deferred);
    const fenced = settlements.length - result.settled.length - deferredIds.size;
    this.#parts.stats.fenced += fenced;
    const deferred = settlements.filter((s) => deferredIds.has(s.rowId));
    return { settled: result.settled.length, fenced, deferred };
  }

  #settleRequest() {
    return {
      deadLettersBlock: this.#parts.options.deadLetterPolicy === 'hold',
      leaseMs: this.#parts.options.leaseMs,
    };
  }

  #count(settlements: Settlement[], settled: Set<string>, messages: OutgoingMessage[]): void {
    const stats = this.#parts.stats;
    for (const s of settlements) {
      if (!settled.has(s.rowId)) continue;
      if (s.kind === 'published') stats.published++;
      else if (s.kind === 'shadow') stats.shadowed++;
      else if (s.kind === 'retry') stats.retried++;
      else if (s.kind === 'release') stats.released++;
      else if (s.kind === 'defer') stats.postponed++;
      else {
        stats.deadLettered++;
        const message = messages.find((m) => m.rowId === s.rowId);
        if (message) this.#parts.events.emit('dispatcher:dead-letter', { message, error: s.error });
      }
    }
  }

  /**
   * Settles deferred rows again, soon and then less often (2 ms doubling to 100 ms), until the
   * writer that held their aggregate has committed. Each deferral extends the rows' lease, so a
   * long writer transaction does not make them expire and go out twice. It gives up one lease
   * after the last answer (the database went away) or one lease after stop(): the rows are then
   * published again once their lease expires (at least once).
   */
  #retryDeferred(owner: string, settlements: Settlement[], messages: OutgoingMessage[]): void {
    const { options, events, stats, idle } = this.#parts;
    idle.begin();
    const run = (async () => {
      // The rows are ours while their lease lasts, and each deferral extends it: stop when it has
      // run out since the last answer (a database that went away), or one lease after stop().
      let leaseUntil = Date.now() + options.leaseMs;
      const giveUpAt = () => {
        const stopRequestedAt = this.#parts.stopRequestedAt();
        return Math.min(
          leaseUntil,
          stopRequestedAt === undefined ? Infinity : stopRequestedAt + options.leaseMs,
        );
      };
      let pending = settlements;
      for (
        let delay = 2;
        pending.length > 0 && Date.now() < giveUpAt();
        delay = Math.min(100, delay * 2)
      ) {
        await new Promise((resolve) => setTimeout(resolve, delay));
        try {
          const asked = Date.now();
          pending = (await this.#applySettle(owner, pending, messages)).deferred;
          leaseUntil = asked + options.leaseMs;
        } catch (error) {
          events.emit('dispatcher:settle:failure', {
            owner,
            error: toError(error),
            messages: pending.length,
          });
        }
      }
      if (pending.length > 0) stats.settleFailures++;
    })();
    this.#deferredSettles.add(run);
    void run.finally(() => {
      this.#deferredSettles.delete(run);
      idle.end();
      // A deferred settle that went through may have made a successor ready.
      this.#parts.wake();
    });
  }
}
