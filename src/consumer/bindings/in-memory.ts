import { toEnvelope } from '../../publishers/envelope.js';
import type { OutgoingMessage } from '../../publishers/publisher.js';
import type { Consumer } from '../create-consumer.js';
import type { DeliveryResult } from '../delivery-result.js';

/** What the binding needs from `InMemoryPublisher`: its `subscribe`. */
export interface InMemorySource {
  subscribe(listener: (message: OutgoingMessage) => void): () => void;
}

/** Options of {@link bindInMemory}. */
export interface InMemoryBindingOptions {
  /** Topics to deliver; default all. */
  topics?: readonly string[];
  /** Upper bound of a retry's wait, in ms, so a demo does not sleep for a minute. Default none. */
  maxRetryDelayMs?: number;
  /** Called with every result. */
  onResult?: (result: DeliveryResult, message: OutgoingMessage) => void;
}

/** A running in-process binding. */
export interface InMemoryBinding {
  /** Deliveries that ended `dead`, in order — the in-process dead-letter queue. */
  readonly deadLetters: { message: OutgoingMessage; result: DeliveryResult }[];
  /** Resolves when nothing is being handled or waiting for a retry (at once if so already). */
  onIdle(): Promise<void>;
  /** Unsubscribes and cancels pending retries; resolves when in-flight deliveries finished. */
  stop(): Promise<void>;
}

/**
 * Delivers what an `InMemoryPublisher` publishes to a consumer, in process: retries after the
 * result's delay, keeps dead letters in a list. For the demo, examples and tests — it has no
 * durability: a retry scheduled in memory dies with the process.
 *
 * @example
 * ```ts
 * const publisher = new InMemoryPublisher();
 * const binding = bindInMemory(publisher, consumer);
 * // ... dispatcher publishes ...
 * await binding.onIdle();
 * ```
 */
export function bindInMemory(
  source: InMemorySource,
  consumer: Consumer,
  options: InMemoryBindingOptions = {},
): InMemoryBinding {
  const deadLetters: InMemoryBinding['deadLetters'] = [];
  const timers = new Set<NodeJS.Timeout>();
  let busy = 0;
  let idleWaiters: (() => void)[] = [];
  let stopped = false;

  const settleIdle = () => {
    if (busy > 0 || timers.size > 0) return;
    const waiters = idleWaiters;
    idleWaiters = [];
    for (const resolve of waiters) resolve();
  };

  const deliver = async (message: OutgoingMessage, attempt: number): Promise<void> => {
    busy += 1;
    try {
      const result = await consumer.handle(toEnvelope(message), {
        attempt,
        messagingSystem: 'memory',
      });
      options.onResult?.(result, message);
      if (result.action === 'dead') deadLetters.push({ message, result });
      if (result.action === 'retry' && !stopped) {
        const delay = Math.min(result.delayMs ?? 0, options.maxRetryDelayMs ?? Infinity);
        const timer = setTimeout(() => {
          timers.delete(timer);
          void deliver(message, attempt + 1);
        }, delay);
        timers.add(timer);
      }
    } finally {
      busy -= 1;
      settleIdle();
    }
  };

  const unsubscribe = source.subscribe((message) => {
    if (stopped) return;
    if (options.topics && !options.topics.includes(message.topic)) return;
    void deliver(message, 1);
  });

  return {
    deadLetters,
    onIdle: () =>
      new Promise<void>((resolve) => {
        idleWaiters.push(resolve);
        settleIdle();
      }),
    async stop() {
      stopped = true;
      unsubscribe();
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      await new Promise<void>((resolve) => {
        idleWaiters.push(resolve);
        settleIdle();
      });
    },
  };
}
