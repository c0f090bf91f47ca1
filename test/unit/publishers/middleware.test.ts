import { describe, expect, it } from 'vitest';
import {
  circuitBreaker,
  type CircuitState,
} from '../../../src/publishers/middleware/circuit-breaker.js';
import { metricsHooks } from '../../../src/publishers/middleware/metrics-hooks.js';
import { timeout } from '../../../src/publishers/middleware/timeout.js';
import { withMiddleware, type PublishOutcome } from '../../../src/publishers/publisher.js';
import { makeMessage } from '../../contract/messages.js';
import { FakePublisher } from './fake-publisher.js';

const down = (): PublishOutcome[] => [{ status: 'retryable', error: 'ECONNREFUSED' }];

describe('timeout middleware', () => {
  it('answers retryable for every message when the inner publish never answers, and aborts it', async () => {
    const inner = new FakePublisher();
    let innerSignal: AbortSignal | undefined;
    inner.behaviour = () => new Promise(() => undefined);
    const publisher = withMiddleware(
      {
        publish: (messages, options) => {
          innerSignal = options?.signal;
          return inner.publish(messages, options);
        },
      },
      timeout(50),
    );

    const outcomes = await publisher.publish([makeMessage(), makeMessage()]);

    expect(outcomes).toEqual([
      { status: 'retryable', error: 'publish did not answer within 50 ms' },
      { status: 'retryable', error: 'publish did not answer within 50 ms' },
    ]);
    expect(innerSignal?.aborted).toBe(true);
  });

  it('returns the inner outcomes when it answers', async () => {
    const inner = new FakePublisher();
    const publisher = withMiddleware(inner, timeout(60_000));
    expect(await publisher.publish([makeMessage()])).toEqual([{ status: 'published' }]);
    await publisher.close?.();
    expect(inner.closed).toBe(1);
  });

  it('rejects a non-positive timeout', () => {
    expect(() => timeout(0)).toThrow(RangeError);
  });
});

describe('circuitBreaker middleware', () => {
  function setup(failureThreshold = 3, cooldownMs = 1000) {
    let clock = 0;
    const states: CircuitState[] = [];
    const inner = new FakePublisher();
    const publisher = withMiddleware(
      inner,
      circuitBreaker({
        failureThreshold,
        cooldownMs,
        now: () => clock,
        onStateChange: (s) => states.push(s),
      }),
    );
    return { inner, publisher, states, advance: (ms: number) => (clock += ms) };
  }

  it('opens after N consecutive failed calls and then fails fast without calling the broker', async () => {
    const { inner, publisher, states, advance } = setup(3, 1000);
    inner.behaviour = down;
    for (let i = 0; i < 3; i++) await publisher.publish([makeMessage()]);
    expect(inner.calls).toHaveLength(3);
    expect(states).toEqual(['open']);

    advance(400);
    const outcomes = await publisher.publish([makeMessage(), makeMessage()]);

    expect(inner.calls).toHaveLength(3);
    expect(outcomes).toHaveLength(2);
    for (const outcome of outcomes) {
      expect(outcome.status).toBe('retryable');
      expect(outcome.status === 'retryable' && outcome.retryAfterMs).toBe(600);
    }
  });

  it('lets one probe through after the cooldown: success closes, failure re-opens', async () => {
    const { inner, publisher, states, advance } = setup(2, 1000);
    inner.behaviour = down;
    await publisher.publish([makeMessage()]);
    await publisher.publish([makeMessage()]);
    advance(1000);

    // Probe fails → open again, for a full cooldown.
    await publisher.publish([makeMessage()]);
    expect(inner.calls).toHaveLength(3);
    expect(states).toEqual(['open', 'half-open', 'open']);
    advance(999);
    await publisher.publish([makeMessage()]);
    expect(inner.calls).toHaveLength(3);

    // Next probe succeeds → closed, calls pass again.
    advance(1);
    inner.behaviour = (messages) => messages.map(() => ({ status: 'published' }));
    expect(await publisher.publish([makeMessage()])).toEqual([{ status: 'published' }]);
    await publisher.publish([makeMessage()]);
    expect(inner.calls).toHaveLength(5);
    expect(states).toEqual(['open', 'half-open', 'open', 'half-open', 'closed']);
  });

  it('admits a single probe while it is in flight', async () => {
    const { inner, publisher, advance } = setup(1, 10);
    inner.behaviour = down;
    await publisher.publish([makeMessage()]);
    advance(10);
    let release!: () => void;
    inner.behaviour = (messages) =>
      new Promise((resolve) => {
        release = () => resolve(messages.map(() => ({ status: 'published' })));
      });

    const probe = publisher.publish([makeMessage()]);
    const concurrent = await publisher.publish([makeMessage()]);
    release();

    expect(concurrent[0]!.status).toBe('retryable');
    expect(await probe).toEqual([{ status: 'published' }]);
    expect(inner.calls).toHaveLength(2);
  });

  it('counts neither permanent-only calls nor partly published calls as failures', async () => {
    const { inner, publisher, states } = setup(2, 1000);
    inner.behaviour = (messages) => messages.map(() => ({ status: 'permanent', error: 'bad' }));
    for (let i = 0; i < 3; i++) await publisher.publish([makeMessage()]);
    inner.behaviour = () => [{ status: 'published' }, { status: 'retryable', error: 'x' }];
    for (let i = 0; i < 3; i++) await publisher.publish([makeMessage(), makeMessage()]);
    expect(states).toEqual([]);
    expect(inner.calls).toHaveLength(6);
  });

  it('treats a throwing publisher as a failed call', async () => {
    const { inner, publisher, states } = setup(1, 1000);
    inner.behaviour = () => {
      throw new Error('boom');
    };
    expect(await publisher.publish([makeMessage()])).toEqual([
      { status: 'retryable', error: 'boom' },
    ]);
    expect(states).toEqual(['open']);
  });
});

describe('metricsHooks middleware', () => {
  it('reports each outcome with its message and the call duration', async () => {
    const inner = new FakePublisher();
    inner.behaviour = () => [{ status: 'published' }, { status: 'permanent', error: 'no' }];
    const seen: [string, string, number][] = [];
    const calls: number[] = [];
    const publisher = withMiddleware(
      inner,
      metricsHooks({
        onOutcome: (message, outcome, durationMs) =>
          seen.push([message.id, outcome.status, durationMs]),
        onCall: (messages) => calls.push(messages.length),
      }),
    );
    const messages = [makeMessage(), makeMessage()];

    const outcomes = await publisher.publish(messages);

    expect(outcomes.map((o) => o.status)).toEqual(['published', 'permanent']);
    expect(seen.map(([id, status]) => [id, status])).toEqual([
      [messages[0]!.id, 'published'],
      [messages[1]!.id, 'permanent'],
    ]);
    expect(seen.every(([, , ms]) => ms >= 0)).toBe(true);
    expect(calls).toEqual([2]);
  });

  it('never fails a publish because a hook throws', async () => {
    const publisher = withMiddleware(
      new FakePublisher(),
      metricsHooks({
        onOutcome: () => {
          throw new Error('metrics down');
        },
        onCall: () => {
          throw new Error('metrics down');
        },
      }),
    );
    expect(await publisher.publish([makeMessage()])).toEqual([{ status: 'published' }]);
  });

  it('sees the fast-fails of a circuit breaker placed inside it', async () => {
    const inner = new FakePublisher();
    inner.behaviour = down;
    const statuses: string[] = [];
    const publisher = withMiddleware(
      inner,
      metricsHooks({ onOutcome: (_m, outcome) => statuses.push(outcome.status) }),
      circuitBreaker({ failureThreshold: 1, cooldownMs: 60_000 }),
    );
    await publisher.publish([makeMessage()]);
    await publisher.publish([makeMessage()]);
    expect(statuses).toEqual(['retryable', 'retryable']);
    expect(inner.calls).toHaveLength(1);
  });
});

describe('every middleware', () => {
  it("keeps the wrapped publisher's ordersWithinCall (a run then still goes in one call)", () => {
    const ordering = Object.assign(new FakePublisher(), { ordersWithinCall: true });
    const wrapped = withMiddleware(
      ordering,
      timeout(1_000),
      circuitBreaker({ failureThreshold: 3, cooldownMs: 1_000 }),
      metricsHooks({}),
    );
    expect(wrapped.ordersWithinCall).toBe(true);
    expect(withMiddleware(new FakePublisher(), timeout(1_000)).ordersWithinCall).toBeFalsy();
  });
});
