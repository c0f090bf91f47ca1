/**
 * The lanes engine's message ids (since migration 030): a UUID that says where its row lives, so
 * that a lookup by message id is one primary-key probe of `outbox_lane_messages (lane, id)`
 * instead of a scan of the table (the effect status, sql/effect-status.ts).
 *
 * The layout, a version 8 UUID (RFC 9562's "custom" version), 128 bits:
 * - 48 bits: Unix milliseconds (`clock_timestamp()`, as `outbox_uuid_v7()`): ids still sort by
 *   creation time, which is what the v7 ids gave;
 * - 4 bits: the version, 8;
 * - 12 bits: the lane (migration 024 has 16);
 * - 2 bits: the variant, binary 10;
 * - 62 bits: the row id (`outbox_lane_ids`).
 *
 * Unique: two rows of the table never share (lane, id) (the primary key; the ids come from one
 * sequence that does not cycle), so two ids written by the writer differ in those bits. Two ids
 * could only be equal if the sequence gave the same id again (a `setval` back, a dump restored
 * beside its origin) AND the same lane AND the same millisecond; random v7 bits are not safer. An
 * id of 2^62 or more (4.6 × 10^18 messages) would lose its top bit: the id then names no row, and
 * a lookup by it reads not-found rather than another message (the lookup checks the whole id).
 * A version 8 id never equals a version 7 one (the claim engine's, the lanes engine's before 030).
 *
 * Expressions, not functions: the writer's INSERT (sql/lanes.ts) computes the id inline, so it
 * costs no function call and needs nothing new of the schema (a writer of this release on a
 * schema not yet at 030 writes them too); the decoding is in the lookup.
 */

/** The message id of the row at `lane`, `id` (SQL expressions of types smallint and bigint). */
export const laneMessageIdSql = (lane: string, id: string) =>
  `encode(int8send(((extract(epoch FROM clock_timestamp()) * 1000)::bigint << 16) | 32768 | ${lane})
         || int8send(${id} | (-9223372036854775808)::bigint), 'hex')::uuid`;

/**
 * The version nibble of the uuid `u` (an SQL expression): 8 for the ids above, 7 for the v7 ids
 * of earlier releases. Migration 030's partial index holds the rows whose version is not 8, under
 * exactly this predicate, and the lookup repeats it so that the planner can use that index.
 */
export const uuidVersionSql = (u: string) => `(get_byte(uuid_send(${u}), 6) >> 4)`;

/** The lane encoded in a version 8 lane message id `u` (meaningless for another version). */
export const laneOfMessageIdSql = (u: string) =>
  `(((get_byte(uuid_send(${u}), 6) & 15) << 8) | get_byte(uuid_send(${u}), 7))::smallint`;

/** The row id encoded in a version 8 lane message id `u` (meaningless for another version). */
export const rowIdOfMessageIdSql = (u: string) =>
  `(('x' || encode(substring(uuid_send(${u}) FROM 9 FOR 8), 'hex'))::bit(64)::bigint & 4611686018427387903)`;

/**
 * Records where each lane message with an id of another version than 8 lives (the v7 ids of the
 * writers before migration 030) in `outbox_lane_v7_ids`, so that the effect status finds them by
 * primary key too; returns how many it added. Migration 030 runs it once under a SHARE lock on
 * the table (every row written before it is recorded). Run it again (`SELECT
 * outbox_lane_record_v7_ids()`) after the last writer of an earlier release stops, if writers of
 * an earlier release still wrote after the migration: their rows have v7 ids too. It reads the
 * whole table once: an upgrade's one-off, never on a path that runs by itself.
 *
 * Why a table of their own rather than an index on the hot table: any index on
 * `outbox_lane_messages`, even a partial one that no new row enters, costs every enqueue
 * statement ~2 µs (sql/effect-status.ts has the figures); this table costs the enqueue nothing,
 * and stops growing once no writer writes v7 ids. Rows that retention deleted leave their entry
 * behind: the lookup then probes a place that is empty, and reads not-found.
 */
export const laneRecordV7IdsFunctionSql = (s: string) => `
CREATE FUNCTION ${s}.outbox_lane_record_v7_ids() RETURNS bigint
LANGUAGE sql AS $$
  WITH added AS (
    INSERT INTO ${s}.outbox_lane_v7_ids (message_id, lane, id)
    SELECT m.message_id, m.lane, m.id FROM ${s}.outbox_lane_messages m
    WHERE ${uuidVersionSql('m.message_id')} <> 8
    ON CONFLICT (message_id) DO NOTHING
    RETURNING 1)
  SELECT count(*) FROM added
$$`;
