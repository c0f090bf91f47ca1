import type pg from 'pg';

/**
 * Bulk-loads dispatched history the way the settle leaves it since migration 021: batch rows of
 * the ring's slot 0 (`outbox_dispatched_batch_0`), 200 messages each, their ids and message ids
 * ranged, the messages as an array of `outbox_dispatched_message` (sql/dispatched-log.ts). `rows` is a
 * SELECT of outbox columns, `id` and `message_id` included (time-ordered, as the outbox assigns
 * them: a batch's ranges stay narrow); `values` its parameters. The caller VACUUMs (this may
 * run inside a transaction).
 */
export async function insertDispatchedHistory(
  client: pg.ClientBase | pg.Pool,
  rows: string,
  values: unknown[],
): Promise<void> {
  await client.query(
    `INSERT INTO outbox_dispatched_batch_0 (ids, message_ids, dispatched_at, message_count, messages)
     SELECT int8range(min(r.id), max(r.id), '[]'),
            outbox_uuid_range((array_agg(r.message_id ORDER BY r.message_id))[1],
                              (array_agg(r.message_id ORDER BY r.message_id DESC))[1], '[]'),
            max(r.dispatched_at), count(*)::int,
            array_agg(jsonb_populate_record(NULL::outbox_dispatched_message, to_jsonb(r)) ORDER BY r.id)
     FROM (${rows}) r
     GROUP BY r.id / 200`,
    values,
  );
}
