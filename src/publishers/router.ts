import { permanent } from './outcomes.js';
import type { OutgoingMessage, PublishOptions, PublishOutcome, Publisher } from './publisher.js';
import { safePublish } from './safe-publish.js';
import { compileTopicPattern, type TopicMatcher } from './topic-pattern.js';

/** One routing rule of a {@link Router}. */
export interface Route {
  /** Topic pattern (see `compileTopicPattern`: `mail.*`, `payment.**`, `order.created`). */
  pattern: string;
  /** Where matching messages go. */
  publisher: Publisher;
  /**
   * Overrides the publisher's topic-derived destination (NATS subject, routing key, stream key,
   * queue URL, Kafka topic, webhook URL) for every message of this route.
   */
  destination?: string;
}

/** Options of {@link Router}. */
export interface RouterOptions {
  /** Rules, tried in order: the first matching pattern wins. */
  routes: readonly Route[];
  /**
   * Publisher for topics no route matches. Without one, such messages are `permanent`
   * ("no route for topic X") and dead-lettered: a typo in a topic should be loud, and a replay
   * after fixing the routes delivers them.
   */
  fallback?: Publisher;
  /** Close every routed publisher (once each) in `close()`. Default true. */
  closePublishers?: boolean;
}

interface CompiledRoute extends Route {
  matches: TopicMatcher;
}

/**
 * A publisher that sends each message to the publisher of the first route its topic matches, so
 * one dispatcher can send `mail.*` to NATS and `payment.**` to RabbitMQ. A call is split into one
 * call per (publisher, destination), made concurrently, and the outcomes are put back in the
 * input order. A routed publisher that throws only fails its own messages (`retryable`).
 *
 * @example
 * ```ts
 * const router = new Router({
 *   routes: [
 *     { pattern: 'mail.*', publisher: nats },
 *     { pattern: 'payment.**', publisher: rabbit, destination: 'payments' },
 *   ],
 * });
 * ```
 */
export class Router implements Publisher {
  readonly #routes: CompiledRoute[];
  readonly #fallback: Publisher | undefined;
  readonly #closePublishers: boolean;

  constructor(options: RouterOptions) {
    this.#routes = options.routes.map((route) => ({
      ...route,
      matches: compileTopicPattern(route.pattern),
    }));
    this.#fallback = options.fallback;
    this.#closePublishers = options.closePublishers ?? true;
  }

  /** The route a topic takes, or undefined when it falls through to the fallback (or none). */
  routeFor(topic: string): Route | undefined {
    const route = this.#routes.find((candidate) => candidate.matches(topic));
    if (!route) return undefined;
    const { matches: _matches, ...plain } = route;
    return plain;
  }

  /** The `messaging.system` of the publisher `message` is routed to (`unknown` when none is). */
  messagingSystem(message: OutgoingMessage): string {
    const route = this.#routes.find((candidate) => candidate.matches(message.topic));
    const publisher = route?.publisher ?? this.#fallback;
    return publisher?.messagingSystem?.(message) ?? 'unknown';
  }

  async publish(
    messages: readonly OutgoingMessage[],
    options: PublishOptions = {},
  ): Promise<PublishOutcome[]> {
    const outcomes = new Array<PublishOutcome>(messages.length);
    const groups = new Map<Publisher, Map<string | undefined, number[]>>();
    messages.forEach((message, index) => {
      const route = this.#routes.find((candidate) => candidate.matches(message.topic));
      const publisher = route?.publisher ?? this.#fallback;
      if (!publisher) {
        outcomes[index] = permanent(`no route for topic ${message.topic}`);
        return;
      }
      // A destination on the call (from an outer router) applies when the route names none.
      const destination = route?.destination ?? options.destination;
      const byDestination = groups.get(publisher) ?? new Map<string | undefined, number[]>();
      groups.set(publisher, byDestination);
      byDestination.set(destination, [...(byDestination.get(destination) ?? []), index]);
    });
    const calls: Promise<void>[] = [];
    for (const [publisher, byDestination] of groups) {
      for (const [destination, indexes] of byDestination) {
        const callOptions: PublishOptions = { ...options };
        if (destination === undefined) delete callOptions.destination;
        else callOptions.destination = destination;
        calls.push(
          safePublish(
            publisher,
            indexes.map((i) => messages[i]!),
            callOptions,
          ).then((results) => indexes.forEach((i, k) => (outcomes[i] = results[k]!))),
        );
      }
    }
    await Promise.all(calls);
    return outcomes;
  }

  /** Closes every distinct routed publisher and the fallback, unless `closePublishers: false`. */
  async close(): Promise<void> {
    if (!this.#closePublishers) return;
    const publishers = new Set<Publisher>(this.#routes.map((route) => route.publisher));
    if (this.#fallback) publishers.add(this.#fallback);
    const results = await Promise.allSettled([...publishers].map((p) => p.close?.()));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
  }
}
