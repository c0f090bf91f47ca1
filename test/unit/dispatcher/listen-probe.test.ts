import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { probeListen, type ListenClient, type SqlExecutor } from '../../../src/index.js';

/**
 * The LISTEN probe's logic on fakes (the real thing, through PgBouncer and directly, is in
 * test/integration/pooler/pgbouncer-operations.test.ts): a notification that arrives, one that
 * does not (a transaction pooler), and a connection that stops answering.
 */
function fakeClient(answer: (text: string) => Promise<unknown> = async () => ({})) {
  const events = new EventEmitter();
  const statements: string[] = [];
  let ended = false;
  const client: ListenClient = {
    query: (text: string) => {
      statements.push(text);
      return answer(text);
    },
    on: ((event: string, listener: (message: { channel: string }) => void) =>
      events.on(event, listener)) as ListenClient['on'],
    end: async () => {
      ended = true;
    },
  };
  return { client, events, statements, ended: () => ended };
}

/** A NOTIFY sender; `deliver` decides whether the listening fake hears it. */
const notifier = (deliver: (channel: string) => void): SqlExecutor => ({
  query: async <Row>(_text: string, values?: readonly unknown[]) => {
    deliver(values![0] as string);
    return { rows: [] as Row[] };
  },
});

describe('probeListen', () => {
  it('delivered: the NOTIFY reached the listener; LISTEN and UNLISTEN on its own channel', async () => {
    const fake = fakeClient();
    const result = await probeListen({
      connect: async () => fake.client,
      notify: notifier((channel) => fake.events.emit('notification', { channel })),
    });
    expect(result.delivered).toBe(true);
    expect(fake.statements).toEqual([
      expect.stringMatching(/^LISTEN "agent_outbox_probe_[0-9a-f]{16}"$/),
      expect.stringMatching(/^UNLISTEN "agent_outbox_probe_[0-9a-f]{16}"$/),
    ]);
    expect(fake.ended()).toBe(true);
  });

  it('not delivered: a notification on another channel does not count', async () => {
    const fake = fakeClient();
    const result = await probeListen({
      connect: async () => fake.client,
      notify: notifier(() => fake.events.emit('notification', { channel: 'public_outbox' })),
      timeoutMs: 100,
    });
    expect(result).toEqual({ delivered: false, waitedMs: expect.any(Number) });
    expect(fake.ended()).toBe(true);
  });

  it('a LISTEN that never answers is an error, not a hang', async () => {
    const fake = fakeClient(() => new Promise(() => undefined));
    await expect(
      probeListen({ connect: async () => fake.client, notify: notifier(() => {}), timeoutMs: 50 }),
    ).rejects.toThrow(/no answer to LISTEN within 50 ms/);
  });
});
