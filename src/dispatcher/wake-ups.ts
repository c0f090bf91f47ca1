import { toError } from '../core/errors.js';
import type { DispatcherEventMap, TypedEmitter } from './events.js';
import type { WakeSource } from './wake-source.js';

/**
 * How a dispatcher's idle loops wait and are woken: the poll-interval sleep that `wake()` cuts
 * short, and the optional {@link WakeSource} armed after an empty claim (wake-source.ts has the
 * protocol). A failing source is reported and otherwise ignored: polling covers it.
 */
export class WakeUps {
  readonly #source: WakeSource | undefined;
  readonly #events: TypedEmitter<DispatcherEventMap>;
  readonly #sleepers = new Set<() => void>();
  #wakeRequested = false;
  #armed = false;
  #generation = 0;

  readonly #onHint: ((hint: string) => boolean) | undefined;

  /**
   * `onHint`: given a wake-up's hint (wake-source.ts) before the sleeps end; when it returns true
   * it has taken the wake-up in hand (it wakes the loop itself if it must) and the sleeps go on.
   */
  constructor(
    source: WakeSource | undefined,
    events: TypedEmitter<DispatcherEventMap>,
    onHint?: (hint: string) => boolean,
  ) {
    this.#source = source;
    this.#events = events;
    this.#onHint = onHint;
  }

  /** True with a wake source: {@link afterClaim} then has work to do. */
  get hasSource(): boolean {
    return Boolean(this.#source);
  }

  /** True from an empty claim's arming to the next claim that found work (see afterClaim). */
  get armed(): boolean {
    return this.#armed;
  }

  /**
   * Counts the armings: each one after an empty claim, and each wake-up the source sends without
   * a hint, which is how it says it (re)connected and may have missed notifications (a writer's
   * too: one that named more than it can). A dispatcher that learned something about the
   * writers of one arming (lane-dispatcher.ts, `#preArmClear`) forgets it when this moves.
   */
  get generation(): number {
    return this.#generation;
  }

  /** Starts the wake source, if any; its wake-ups end the loops' sleeps. */
  start(): void {
    if (this.#source) {
      this.#source
        .start((hint) => {
          if (hint !== undefined && this.#onHint?.(hint) === true) return;
          if (hint === undefined) this.#generation++;
          this.wake();
        })
        .catch((error: unknown) =>
          this.#events.emit('dispatcher:wake-source:failure', { error: toError(error) }),
        );
    }
  }

  /** Stops the wake source, if any; never rejects. */
  async stop(): Promise<void> {
    await this.#source?.stop().catch(() => undefined);
  }

  /** Ends every sleep now; with no loop asleep, the next sleep is skipped instead. */
  wake(): void {
    if (this.#sleepers.size === 0) this.#wakeRequested = true;
    for (const wake of [...this.#sleepers]) wake();
  }

  /** Waits `ms`, or until {@link wake}. */
  sleep(ms: number): Promise<void> {
    // A wake() that arrived while we were claiming must not be lost: skip this wait.
    if (this.#wakeRequested) {
      this.#wakeRequested = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#sleepers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#sleepers.add(done);
    });
  }

  /**
   * Arms or disarms the wake source after a claim that did not fail (`claimed` messages). True:
   * it was just armed, claim once more before sleeping.
   */
  async afterClaim(claimed: number): Promise<boolean> {
    if (claimed === 0) {
      if (!this.#armed) {
        // Arm first, then claim once more: work committed before arming is found by that
        // claim, work committed after it triggers a wake-up.
        this.#armed = true;
        this.#generation++;
        await this.#call('idle');
        return true;
      }
    } else if (this.#armed) {
      // Found work: producers can stop notifying until the next empty claim. Not awaited
      // (claiming must not wait for it; the source runs its statements in order, so a later
      // idle() still lands after this), and committed without waiting for the WAL flush (a
      // waiter row is ephemeral), so a flip costs two cheap statements on the listening
      // connection. Measured against staying armed through bursts of 250 ms (the previous
      // policy, which saved two flushed writes per flip), interleaved runs: notify p95
      // 4.0–4.8 vs 4.8–5.7 ms at 1,000 msg/s; producers at 8 clients 0.97–0.99 vs 0.94–0.97
      // of their throughput without wake-ups (bench/).
      this.#armed = false;
      void this.#call('busy');
    }
    return false;
  }

  async #call(method: 'idle' | 'busy'): Promise<void> {
    try {
      await this.#source?.[method]?.();
    } catch (error) {
      this.#events.emit('dispatcher:wake-source:failure', { error: toError(error) });
    }
  }
}
