import type { Migration } from './migration.js';

/**
 * Per-aggregate consumer positions: the last sequence a consumer processed for each aggregate.
 *
 * Brokers without per-key ordering (RabbitMQ with several consumers, Redis Streams with claims,
 * Cloudflare Queues, SQS standard, HTTP retries) can deliver message n+1 of an aggregate before
 * message n. The consumer runtime compares the delivered `sequence` with `last_sequence` in the
 * same transaction that records the effect, so order is enforced at the consumer whatever the
 * broker does. Sequences are per aggregate across all topics (see 001), so the row is keyed by
 * (consumer, aggregate), not by topic.
 *
 * Rows are never pruned with the ledger: forgetting a position would make stale duplicates look
 * new again.
 */
export const consumerPositions: Migration = {
  version: 3,
  name: 'consumer-positions',
  up: (s) => [
    `
CREATE TABLE ${s}.consumer_positions (
  consumer      text        NOT NULL,
  aggregate_id  text        NOT NULL,
  last_sequence bigint      NOT NULL,
  updated_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, aggregate_id)
)`,
  ],
};
