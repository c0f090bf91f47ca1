import type { Consumer } from '../create-consumer.js';
import type { RunningBinding } from './nats.js';
import { observe, reportDead, type BindingHooks } from './settle.js';

/**
 * The subset of an `ioredis` client the binding calls: the generic `call`. Give the binding a
 * DEDICATED connection (`redis.duplicate()`): `XREADGROUP ... BLOCK` holds it while it waits.
 */
export interface RedisCallable {
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
}

/** One stream entry as the binding sees it. */
export interface RedisStreamEntry {
  stream: string;
  id: string;
  fields: Record<string, string>;
}

/** Stream key of a topic: `outbox:<topic>` (the Redis publisher writes there). */
export const outboxStreamKey = (topic: string): string => `outbox:${topic}`;

/** Options of {@link bindRedisStreams}. */
export interface RedisStreamsBindingOptions extends BindingHooks<RedisStreamEntry> {
  /** Topics to read; one stream each. */
  topics: readonly string[];
  /** Consumer group (one per consuming service); created if missing, see `startId`. */
  group: string;
  /** This process's name within the group (unique per process, e.g. hostname-pid). */
  consumerName: string;
  /** Where a newly created group starts: `0` (whole stream) or `$` (new entries). Default `0`. */
  startId?: string;
  /** Entries per read. Default 10. */
  count?: number;
  /** How long one read blocks waiting for entries, in ms; also bounds `stop()`. Default 1000. */
  blockMs?: number;
  /**
   * Pending entries idle longer than this are re-claimed (`XAUTOCLAIM`) — from a crashed process,
   * or our own retries. Redis has no per-message redelivery delay, so this is the retry delay
   * (a result's longer `delayMs` is honoured by skipping the entry locally). Default 30 000.
   */
  claimIdleMs?: number;
  /** Stream that receives dead entries. Default `outbox:dead:<topic>`. */
  deadLetterStream?: (topic: string) => string;
}

/**
 * Reads `outbox:<topic>` streams through a consumer group. Wire format: entry field `envelope` =
 * envelope JSON (the `id`, `aggregateId`, `sequence` fields are informative). Settling: ack →
 * `XACK`; retry → left pending, re-claimed after `claimIdleMs`; dead → `onDead`, `XADD` to the
 * dead-letter stream (fields `envelope`, `reason`, `detail`, `source_id`), then `XACK`.
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * const binding = await bindRedisStreams(new Redis(), consumer, {
 *   topics: ['mail.send'], group: 'mailer', consumerName: `mailer-${process.pid}`,
 * });
 * ```
 */
export async function bindRedisStreams(
  redis: RedisCallable,
  consumer: Consumer,
  options: RedisStreamsBindingOptions,
): Promise<RunningBinding> {
  const keys = options.topics.map(outboxStreamKey);
  const topicOf = new Map(options.topics.map((topic) => [outboxStreamKey(topic), topic]));
  const deadStream = options.deadLetterStream ?? ((topic: string) => `outbox:dead:${topic}`);
  const claimIdleMs = options.claimIdleMs ?? 30_000;
  const notBefore = new Map<string, number>();
  const cursors = new Map(keys.map((key) => [key, '0-0']));
  let stopping = false;

  for (const key of keys) {
    try {
      await redis.call('XGROUP', 'CREATE', key, options.group, options.startId ?? '0', 'MKSTREAM');
    } catch (error) {
      if (!String((error as Error).message).includes('BUSYGROUP')) throw error;
    }
  }

  const settle = async (entry: RedisStreamEntry) => {
    const waitUntil = notBefore.get(entry.id);
    if (waitUntil !== undefined && Date.now() < waitUntil) return; // stays pending, re-claimed later
    notBefore.delete(entry.id);
    const result = await consumer.handle(entry.fields.envelope ?? '', {
      messagingSystem: 'redis',
    });
    observe(options, result, entry);
    if (result.action === 'retry') {
      notBefore.set(entry.id, Date.now() + (result.delayMs ?? 0));
      return;
    }
    if (result.action === 'dead') {
      if (!(await reportDead(options, entry, result))) return;
      await redis.call(
        'XADD',
        deadStream(topicOf.get(entry.stream) ?? entry.stream),
        '*',
        'envelope',
        entry.fields.envelope ?? '',
        'reason',
        result.reason,
        'detail',
        result.detail ?? '',
        'source_id',
        entry.id,
      );
    }
    await redis.call('XACK', entry.stream, options.group, entry.id);
  };

  const reclaim = async (key: string) => {
    const reply = (await redis.call(
      'XAUTOCLAIM',
      key,
      options.group,
      options.consumerName,
      claimIdleMs,
      cursors.get(key) ?? '0-0',
      'COUNT',
      options.count ?? 10,
    )) as [string, RawEntry[]];
    cursors.set(key, reply[0]);
    return toEntries(key, reply[1]);
  };

  const read = async () => {
    const reply = (await redis.call(
      'XREADGROUP',
      'GROUP',
      options.group,
      options.consumerName,
      'COUNT',
      options.count ?? 10,
      'BLOCK',
      options.blockMs ?? 1_000,
      'STREAMS',
      ...keys,
      ...keys.map(() => '>'),
    )) as [string, RawEntry[]][] | null;
    return (reply ?? []).flatMap(([key, entries]) => toEntries(key, entries));
  };

  const loop = (async () => {
    while (!stopping) {
      try {
        for (const key of keys) for (const entry of await reclaim(key)) await settle(entry);
        for (const entry of await read()) await settle(entry);
      } catch (error) {
        options.onError?.(error);
        // Keep going after a transient failure, without spinning on a dead connection.
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    }
  })();

  return {
    async stop() {
      stopping = true;
      await loop;
    },
  };
}

/** An entry as Redis returns it: id and a flat field/value list (null when deleted). */
type RawEntry = [string, string[] | null];

function toEntries(stream: string, raw: RawEntry[]): RedisStreamEntry[] {
  return raw.map(([id, flat]) => {
    const fields: Record<string, string> = {};
    for (let i = 0; flat && i + 1 < flat.length; i += 2) fields[flat[i]!] = flat[i + 1]!;
    return { stream, id, fields };
  });
}
