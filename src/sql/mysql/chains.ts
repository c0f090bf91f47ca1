import { NOW_MS } from './clock.js';

/**
 * `outbox_unordered_topics`: LIKE patterns (made from globs by `globToLike`) of topics whose
 * messages take no part in their aggregate's order. The insert trigger reads it when a message
 * does not say itself (schema.ts), so the decision is made once, when the message is written, and
 * every dispatcher agrees on it. Adding a pattern changes messages written from then on, not
 * those already pending. ? pattern.
 */
export const addUnorderedTopicsSql = `
INSERT IGNORE INTO outbox_unordered_topics (pattern, created_at) VALUES (?, ${NOW_MS})`;
