import { describe, expect, it } from 'vitest';
import {
  createBudgetBreaker,
  DeferError,
  withBudget,
  type BudgetState,
  type HandlerContext,
} from '../../../src/consumer/index.js';
import { makeEnvelope } from '../../fixtures/consumer/envelopes.js';

const context = (): HandlerContext => ({
  idempotencyKey: 'k',
  attempt: 1,
  signal: new AbortController().signal,
});

describe('BudgetBreaker', () => {
  it('defers once the reported spend reaches the budget, until the window resets', async () => {
    let now = 1_000_000;
    const breaker = createBudgetBreaker({ windowMs: 60_000, maxSpend: 1_000, now: () => now });
    const events: [string, BudgetState][] = [];
    breaker.on('budget:exceeded', (s) => events.push(['exceeded', s]));
    breaker.on('budget:reset', (s) => events.push(['reset', s]));
    const calls: string[] = [];
    const handler = withBudget(breaker, async (message, { reportSpend }) => {
      calls.push(message.id);
      reportSpend(600);
    });

    await handler(makeEnvelope(), context());
    await handler(makeEnvelope(), context()); // 1200 >= 1000: open
    expect(events.map(([name]) => name)).toEqual(['exceeded']);
    expect(events[0]![1]).toMatchObject({ spent: 1200, exceeded: 'spend' });

    now += 10_000;
    const third = makeEnvelope();
    const error = await handler(third, context()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeferError);
    expect((error as DeferError).delayMs).toBe(50_000);
    expect(calls).toHaveLength(2);

    now += 50_000;
    await handler(third, context());
    expect(calls).toEqual(expect.arrayContaining([third.id]));
    expect(events.map(([name]) => name)).toEqual(['exceeded', 'reset']);
    expect(breaker.state).toMatchObject({ spent: 600, calls: 1, exceeded: undefined });
    breaker.dispose();
  });

  it('rate limit: maxCalls per window', async () => {
    let now = 0;
    const breaker = createBudgetBreaker({ windowMs: 1_000, maxCalls: 2, now: () => now });
    const handler = withBudget(breaker, async () => undefined);
    await handler(makeEnvelope(), context());
    await handler(makeEnvelope(), context());
    await expect(handler(makeEnvelope(), context())).rejects.toBeInstanceOf(DeferError);
    now = 2_500; // two windows later
    await handler(makeEnvelope(), context());
    expect(breaker.state).toMatchObject({ windowStart: 2_000, calls: 1 });
    breaker.dispose();
  });

  it('rejects a breaker without any limit and a negative spend', () => {
    expect(() => createBudgetBreaker({ windowMs: 1_000 })).toThrow(/maxSpend/);
    const breaker = createBudgetBreaker({ windowMs: 1_000, maxSpend: 1 });
    expect(() => breaker.reportSpend(-1)).toThrow(/invalid/);
  });
});
