import type { OutgoingMessage, Publisher } from '../publishers/publisher.js';
import { Router } from '../publishers/router.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { DestinationLimits } from './destination-limits.js';
import type { DispatcherEventMap, TypedEmitter } from './events.js';
import type { MessageFate } from './ordered-publish.js';
import type { ResolvedDispatcherOptions } from './options.js';
import type { Settlement } from './outbox-store.js';

/** A claim split by the gate: what to publish now, what waits, the probes of paused routes. */
export interface GatedClaim {
  send: OutgoingMessage[];
  held: Settlement[];
  probes: Map<string, OutgoingMessage>;
}

/**
 * A dispatcher's use of {@link DestinationLimits} (paused routes and rate limits, issue 27):
 * before publishing, what may not go now is set aside; after, the outcomes pause or resume
 * routes. Only with an executor: a dispatcher over a bare store has no limits and lets
 * everything through.
 */
export class RouteGate {
  readonly #limits: DestinationLimits | undefined;
  readonly #events: TypedEmitter<DispatcherEventMap>;
  readonly #wake: () => void;

  constructor(parts: {
    executor: SqlExecutor | undefined;
    options: ResolvedDispatcherOptions;
    publisher: Publisher;
    events: TypedEmitter<DispatcherEventMap>;
    /** Ends the loops' sleeps: a resumed route's messages are due now. */
    wake: () => void;
  }) {
    const { executor, options, publisher } = parts;
    this.#events = parts.events;
    this.#wake = parts.wake;
    this.#limits = executor
      ? new DestinationLimits({
          executor,
          schema: options.schema,
          // A route: the Router's route a topic takes (`*` for its fallback or a lone publisher).
          routeOf:
            publisher instanceof Router
              ? (topic) => publisher.routeFor(topic)?.pattern ?? '*'
              : () => '*',
          pause: options.routePause,
          leaseMs: options.leaseMs,
        })
      : undefined;
  }

  /**
   * The claim's messages split by {@link DestinationLimits.gate}; everything goes when there are
   * no limits. Rejects when the limits cannot be read.
   */
  async gate(owner: string, messages: OutgoingMessage[]): Promise<GatedClaim> {
    if (!this.#limits)
      return { send: messages, held: [], probes: new Map<string, OutgoingMessage>() };
    return await this.#limits.gate(owner, messages);
  }

  /** After the settle of a claim gated as `gated` committed (see DestinationLimits.deferred). */
  deferred(gated: GatedClaim): void {
    this.#limits?.deferred(gated.held);
  }

  /** Milliseconds until a message deferred for a rate-limit token is due (see DestinationLimits). */
  nextTokenInMs(): number | undefined {
    return this.#limits?.nextTokenInMs();
  }

  /**
   * After publishing `sent`: pauses and resumes routes by their fates (a failed review changes
   * nothing), then appends the held messages' settlements to `settlements`.
   */
  async review(
    owner: string,
    sent: OutgoingMessage[],
    fates: MessageFate[],
    settlements: Settlement[],
    gated: GatedClaim,
  ): Promise<void> {
    if (!this.#limits) return;
    const routes = await this.#limits
      .review(owner, sent, fates, settlements, gated.probes)
      .catch(() => ({ paused: [], resumed: [] }));
    routes.paused.forEach((paused) => this.#events.emit('dispatcher:route:paused', paused));
    routes.resumed.forEach((route) => this.#events.emit('dispatcher:route:resumed', { route }));
    if (routes.resumed.length > 0) this.#wake();
    settlements.push(...gated.held);
  }
}
