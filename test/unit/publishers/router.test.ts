import { describe, expect, it } from 'vitest';
import { Router } from '../../../src/publishers/router.js';
import { makeMessage } from '../../contract/messages.js';
import { FakePublisher } from './fake-publisher.js';

describe('Router', () => {
  it('sends each message to the first matching route and keeps the outcome order', async () => {
    const nats = new FakePublisher();
    const rabbit = new FakePublisher();
    rabbit.behaviour = (messages) => messages.map((m) => ({ status: 'permanent', error: m.id }));
    const router = new Router({
      routes: [
        { pattern: 'mail.*', publisher: nats },
        { pattern: 'payment.**', publisher: rabbit },
        { pattern: '**', publisher: nats, destination: 'catch-all' },
      ],
    });
    const messages = [
      makeMessage({ topic: 'payment.charge' }),
      makeMessage({ topic: 'mail.send' }),
      makeMessage({ topic: 'payment.refund.partial' }),
      makeMessage({ topic: 'audit.log' }),
      makeMessage({ topic: 'mail.bounce' }),
    ];

    const outcomes = await router.publish(messages);

    expect(outcomes).toEqual([
      { status: 'permanent', error: messages[0]!.id },
      { status: 'published' },
      { status: 'permanent', error: messages[2]!.id },
      { status: 'published' },
      { status: 'published' },
    ]);
    // One call per (publisher, destination).
    expect(rabbit.calls.map((c) => c.messages.map((m) => m.topic))).toEqual([
      ['payment.charge', 'payment.refund.partial'],
    ]);
    expect(nats.calls).toHaveLength(2);
    const [plain, routed] = nats.calls;
    expect(plain!.messages.map((m) => m.topic)).toEqual(['mail.send', 'mail.bounce']);
    expect(plain!.options?.destination).toBeUndefined();
    expect(routed!.messages.map((m) => m.topic)).toEqual(['audit.log']);
    expect(routed!.options?.destination).toBe('catch-all');
  });

  it('makes unmatched topics permanent without a fallback, and uses the fallback if given', async () => {
    const mail = new FakePublisher();
    const message = makeMessage({ topic: 'order.created' });

    const strict = new Router({ routes: [{ pattern: 'mail.*', publisher: mail }] });
    expect(await strict.publish([message])).toEqual([
      { status: 'permanent', error: 'no route for topic order.created' },
    ]);

    const fallback = new FakePublisher();
    const lenient = new Router({ routes: [{ pattern: 'mail.*', publisher: mail }], fallback });
    expect(await lenient.publish([message])).toEqual([{ status: 'published' }]);
    expect(fallback.calls[0]!.messages).toEqual([message]);
    expect(mail.calls).toHaveLength(0);
  });

  it('fails only the messages of a publisher that throws or breaks the contract', async () => {
    const broken = new FakePublisher();
    broken.behaviour = () => {
      throw new Error('connection reset; password=hunter2');
    };
    const short = new FakePublisher();
    short.behaviour = () => [];
    const fine = new FakePublisher();
    const router = new Router({
      routes: [
        { pattern: 'a', publisher: broken },
        { pattern: 'b', publisher: short },
        { pattern: 'c', publisher: fine },
      ],
    });

    const outcomes = await router.publish([
      makeMessage({ topic: 'a' }),
      makeMessage({ topic: 'b' }),
      makeMessage({ topic: 'c' }),
    ]);

    expect(outcomes[0]!.status).toBe('retryable');
    expect(outcomes[0]!.status === 'retryable' && outcomes[0]!.error).toBe(
      'connection reset; password=[REDACTED]',
    );
    expect(outcomes[1]).toEqual({
      status: 'retryable',
      error: 'publisher returned 0 outcomes for 1 messages',
    });
    expect(outcomes[2]).toEqual({ status: 'published' });
  });

  it('passes the signal through and reports its route', async () => {
    const publisher = new FakePublisher();
    const router = new Router({ routes: [{ pattern: 'x.*', publisher, destination: 'd' }] });
    const signal = new AbortController().signal;
    await router.publish([makeMessage({ topic: 'x.y' })], { signal });
    expect(publisher.calls[0]!.options).toEqual({ signal, destination: 'd' });
    expect(router.routeFor('x.y')).toEqual({ pattern: 'x.*', publisher, destination: 'd' });
    expect(router.routeFor('z')).toBeUndefined();
  });

  it('closes each distinct publisher once, unless told not to', async () => {
    const a = new FakePublisher();
    const b = new FakePublisher();
    await new Router({
      routes: [
        { pattern: 'a', publisher: a },
        { pattern: 'a2', publisher: a },
      ],
      fallback: b,
    }).close();
    expect([a.closed, b.closed]).toEqual([1, 1]);

    await new Router({ routes: [{ pattern: 'a', publisher: a }], closePublishers: false }).close();
    expect(a.closed).toBe(1);
  });

  it('rejects an invalid pattern at construction', () => {
    expect(
      () => new Router({ routes: [{ pattern: 'mail.s*', publisher: new FakePublisher() }] }),
    ).toThrow(TypeError);
  });
});
