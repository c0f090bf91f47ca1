import { describe, expect, it } from 'vitest';
import type { RedisClientLike } from '../../../src/publishers/redis/redis-client.js';
import { RedisStreamsPublisher } from '../../../src/publishers/redis/redis-streams-publisher.js';
import {
  XADD_ONCE_SCRIPT,
  XADD_ONCE_SHA1,
} from '../../../src/publishers/redis/xadd-once-script.js';
import { makeMessage } from '../../contract/messages.js';

// Flushing the script cache of the shared Redis would disturb other test runs, so the NOSCRIPT
// path (a restarted server) is checked against a recording client.
describe('RedisStreamsPublisher script loading', () => {
  it('falls back to EVAL once when the server does not know the script', async () => {
    const calls: string[] = [];
    let loaded = false;
    const client: RedisClientLike = {
      evalsha: async (sha) => {
        calls.push(`evalsha ${sha === XADD_ONCE_SHA1}`);
        if (!loaded) throw new Error('NOSCRIPT No matching script. Please use EVAL.');
        return [1, '1-0'];
      },
      eval: async (script, numkeys, ...args) => {
        calls.push(`eval ${script === XADD_ONCE_SCRIPT} ${numkeys} ${args[0]}`);
        loaded = true;
        return [1, '1-0'];
      },
      quit: async () => 'OK',
    };
    const publisher = new RedisStreamsPublisher({ connection: client });

    expect(await publisher.publish([makeMessage({ topic: 'a' })])).toEqual([
      { status: 'published' },
    ]);
    expect(await publisher.publish([makeMessage({ topic: 'a' })])).toEqual([
      { status: 'published' },
    ]);

    expect(calls).toEqual(['evalsha true', 'eval true 2 outbox:a', 'evalsha true']);
  });

  it('does not hide other errors behind the fallback', async () => {
    const client: RedisClientLike = {
      evalsha: async () => {
        throw new Error('OOM command not allowed');
      },
      eval: async () => {
        throw new Error('must not be called');
      },
      quit: async () => 'OK',
    };
    const [outcome] = await new RedisStreamsPublisher({ connection: client }).publish([
      makeMessage(),
    ]);
    expect(outcome).toEqual({
      status: 'retryable',
      error: 'Redis: XADD outbox:test.topic: OOM command not allowed',
    });
  });
});
