import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { outboxTool, type TransactionRunner } from '../../../src/agent/index.js';
import {
  committedResult,
  dedupedResult,
  failedResult,
  type ToolAnswer,
} from '../../../src/agent/tool-result.js';

const json = (result: ToolAnswer) => result.json;
const words = (result: ToolAnswer) => result.words;

describe('tool results', () => {
  it('a commit lists the queued effects', () => {
    const result = committedResult(
      { orderId: 1 },
      [
        {
          id: '1',
          messageId: 'm1',
          sequence: 1,
          topic: 'payment.charge',
          aggregateId: 'order:1',
          deduped: false,
        },
      ],
      'Order 1 created.',
    );
    expect(result.isError).toBe(false);
    expect(json(result)).toEqual({
      ok: true,
      deduped: false,
      result: { orderId: 1 },
      queued: [{ topic: 'payment.charge', messageId: 'm1' }],
    });
    expect(words(result)).toMatch(
      /^Order 1 created\. Saved .* 1 queued side effect \(payment\.charge\)/,
    );
  });

  it('a duplicate is ok and deduped', () => {
    expect(json(dedupedResult(null))).toEqual({ ok: true, deduped: true });
  });

  it('a failure is an error with secrets redacted', () => {
    const result = failedResult(new Error('connect postgres://app:s3cret@db/x failed'), false);
    expect(result.isError).toBe(true);
    expect(JSON.stringify(result)).not.toContain('s3cret');
    expect(words(result)).toMatch(/nothing was saved/);
  });

  it('an unconfirmed commit says the outcome is unknown and to call again', () => {
    expect(words(failedResult(new Error('Connection terminated'), true))).toMatch(
      /outcome is unknown.*same idempotency_key/,
    );
  });

  it('outboxTool refuses an input that declares idempotency_key itself', () => {
    const transactions: TransactionRunner = { run: () => Promise.reject(new Error('unused')) };
    expect(() =>
      outboxTool({
        name: 't',
        description: 'd',
        input: { idempotency_key: z.string() },
        transactions,
        handler: async () => null,
      }),
    ).toThrow(/declares "idempotency_key"/);
  });
});
