import { createHash } from 'node:crypto';

/**
 * XADD unless this message id was added before, atomically (one Lua script runs alone).
 *
 * KEYS[1] stream, KEYS[2] dedup key; ARGV[1] dedup TTL in ms, ARGV[2] MAXLEN (0 = no trimming),
 * ARGV[3..] field/value pairs. Returns `{1, entryId}` when added, `{0, entryId}` for a duplicate.
 *
 * The dedup key is written AFTER the XADD: a script that fails half-way is not rolled back, so
 * writing the key first would let an XADD error (WRONGTYPE, OOM) mark a message as delivered
 * that never was. Alternatives considered: a deterministic entry id (`XADD key <ms>-<seq>`)
 * dedupes only while ids increase, and a consumer-side-only dedup gives the consumer every
 * duplicate. The two keys live in different hash slots, so this does not run on Redis Cluster
 * as is (documented in docs/publishers.md).
 */
export const XADD_ONCE_SCRIPT = `
local existing = redis.call('GET', KEYS[2])
if existing then
  return {0, existing}
end
local maxlen = tonumber(ARGV[2])
local id
if maxlen > 0 then
  id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', maxlen, '*', unpack(ARGV, 3))
else
  id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 3))
end
redis.call('SET', KEYS[2], id, 'PX', ARGV[1])
return {1, id}
`;

/** SHA-1 of {@link XADD_ONCE_SCRIPT}, for EVALSHA. */
export const XADD_ONCE_SHA1 = createHash('sha1').update(XADD_ONCE_SCRIPT).digest('hex');
