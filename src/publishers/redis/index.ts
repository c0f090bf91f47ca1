/**
 * `agent-outbox/publishers/redis`: Redis Streams publisher. Peer dependency: `ioredis`.
 * @packageDocumentation
 */
export {
  DEFAULT_REDIS_DEDUP_TTL_MS,
  DEFAULT_REDIS_PREFIX,
  RedisStreamsPublisher,
  type RedisStreamsPublisherOptions,
} from './redis-streams-publisher.js';
export type { RedisClientLike, RedisConstructorOptions, RedisModuleLike } from './redis-client.js';
export { XADD_ONCE_SCRIPT, XADD_ONCE_SHA1 } from './xadd-once-script.js';
