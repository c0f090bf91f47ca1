import type { D1Db, Envelope } from '../../../src/cloudflare/index.js';

interface OutboxRow {
  message_id: string;
  topic: string;
  aggregate_id: string;
  sequence: number;
  payload: string;
  headers: string;
  created_at: number;
}

/** The envelope the dispatcher sends for an outbox row, rebuilt from D1 (for forced redeliveries). */
export async function envelopeOf(db: D1Db, messageId: string): Promise<Envelope> {
  const row = await db
    .prepare(
      'SELECT message_id, topic, aggregate_id, sequence, payload, headers, created_at FROM outbox WHERE message_id = ?',
    )
    .bind(messageId)
    .first<OutboxRow>();
  if (!row) throw new Error(`no outbox row ${messageId}`);
  return {
    id: row.message_id,
    topic: row.topic,
    aggregateId: row.aggregate_id,
    sequence: row.sequence,
    payload: JSON.parse(row.payload),
    headers: JSON.parse(row.headers),
    createdAt: new Date(row.created_at).toISOString(),
  };
}

/** A hand-made envelope, for messages that never went through the outbox. */
export function envelope(
  aggregateId: string,
  sequence: number,
  topic: string,
  payload: unknown,
): Envelope {
  return {
    id: crypto.randomUUID(),
    topic,
    aggregateId,
    sequence,
    payload: payload as Envelope['payload'],
    headers: {},
    createdAt: new Date().toISOString(),
  };
}
