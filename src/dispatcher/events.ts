import { EventEmitter } from 'node:events';
import type { SpanContext } from '@opentelemetry/api';
import type { OutgoingMessage, PublishOutcome } from '../publishers/publisher.js';

/**
 * Events of a dispatcher, named `scope:subject:verb`. Listeners must not throw; metrics and logs
 * attach here.
 */
export interface DispatcherEventMap {
  'dispatcher:start': [{ owner: string }];
  'dispatcher:stop': [{ owner: string }];
  'dispatcher:claim:success': [{ owner: string; count: number; durationMs: number }];
  'dispatcher:claim:failure': [{ error: Error; retryInMs: number }];
  /** One per message after its publish attempt. */
  'dispatcher:publish:outcome': [
    { message: OutgoingMessage; outcome: PublishOutcome; durationMs: number },
  ];
  /** `spanContext`: the batch span's, when an OpenTelemetry SDK records the batch. */
  'dispatcher:settle:success': [
    {
      owner: string;
      settled: number;
      fenced: number;
      durationMs: number;
      spanContext?: SpanContext;
    },
  ];
  /** Settling failed: the messages stay leased, and are published again after the lease expires. */
  'dispatcher:settle:failure': [
    { owner: string; error: Error; messages: number; spanContext?: SpanContext },
  ];
  'dispatcher:dead-letter': [{ message: OutgoingMessage; error: string }];
  'dispatcher:idle': [];
  /** A route's destination was found down (or said `Retry-After`): its messages wait (issue 27). */
  'dispatcher:route:paused': [{ route: string; reason: string }];
  /** A paused route's probe got an answer: the route goes on. */
  'dispatcher:route:resumed': [{ route: string }];
  /**
   * A claim or settle was refused because the database is read-only (SQLSTATE 25006). Once per
   * spell, not per poll: claims keep being retried with backoff, nothing is dead-lettered.
   */
  'dispatcher:database:read-only': [{ error: Error }];
  /** The first claim or settle that went through after a read-only spell. */
  'dispatcher:database:writable': [{ readOnlyMs: number }];
  /** A wake source failed; the dispatcher goes on polling. */
  'dispatcher:wake-source:failure': [{ error: Error }];
}

/** Typed wrapper over node's EventEmitter. */
export class TypedEmitter<Events extends { [K in keyof Events]: unknown[] }> {
  readonly #emitter = new EventEmitter();

  on<K extends keyof Events & string>(
    event: K,
    listener: (...args: Events[K]) => void,
  ): () => void {
    this.#emitter.on(event, listener as (...args: unknown[]) => void);
    return () => this.#emitter.off(event, listener as (...args: unknown[]) => void);
  }

  emit<K extends keyof Events & string>(event: K, ...args: Events[K]): void {
    // A throwing listener must not break the dispatch loop.
    for (const listener of this.#emitter.listeners(event)) {
      try {
        (listener as (...a: Events[K]) => void)(...args);
      } catch {
        /* listeners must not throw; ignoring keeps the dispatcher alive */
      }
    }
  }
}
