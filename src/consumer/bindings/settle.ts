import type { DeliveryResult } from '../delivery-result.js';

/**
 * Hooks shared by the broker bindings. Everything a binding cannot settle normally is reported,
 * never swallowed (SPEC G6).
 */
export interface BindingHooks<Raw> {
  /** Called with every result and the raw delivery, e.g. for logging and metrics. */
  onResult?: (result: DeliveryResult, raw: Raw) => void;
  /**
   * Called before a `dead` delivery is settled, e.g. to copy it to your own dead-letter store.
   * If it throws, the delivery is retried instead of settled, so it is not lost.
   */
  onDead?: (raw: Raw, result: DeliveryResult) => Promise<void> | void;
  /** Infrastructure errors of the binding itself (ack failed, read failed, connection lost). */
  onError?: (error: unknown) => void;
}

/** Runs `onDead`; false when it failed and the delivery must be retried instead. */
export async function reportDead<Raw>(
  hooks: BindingHooks<Raw>,
  raw: Raw,
  result: DeliveryResult,
): Promise<boolean> {
  try {
    await hooks.onDead?.(raw, result);
    return true;
  } catch (error) {
    hooks.onError?.(error);
    return false;
  }
}

/** Calls an observer, ignoring its errors: observing must not change what happens to a message. */
export function observe<Raw>(hooks: BindingHooks<Raw>, result: DeliveryResult, raw: Raw): void {
  try {
    hooks.onResult?.(result, raw);
  } catch {
    // ignored on purpose, see above
  }
}

/** Bounded concurrency for the pull loops: waits until fewer than `limit` tasks run. */
export class TaskSlots {
  readonly #limit: number;
  readonly #running = new Set<Promise<void>>();

  constructor(limit: number) {
    this.#limit = Math.max(1, limit);
  }

  async run(task: () => Promise<void>): Promise<void> {
    while (this.#running.size >= this.#limit) await Promise.race(this.#running);
    const promise = task().finally(() => this.#running.delete(promise));
    this.#running.add(promise);
  }

  /** Resolves when every started task finished. */
  async drain(): Promise<void> {
    await Promise.all(this.#running);
  }
}
