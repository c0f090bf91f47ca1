/**
 * Which statements run as named prepared statements (see `fromPg`), and under which names.
 *
 * Opt-in per statement: a prepared statement switches to a GENERIC plan after five runs when
 * Postgres estimates it no worse, and a generic plan cannot see the parameters. For a statement
 * whose best plan depends on the data (the dispatcher's claim: an index walk in due order with a
 * LIMIT) that went badly wrong — measured in bench/ on a freshly created outbox, notify latency
 * p95 went from 11 ms to 225 ms. The settle was prepared for a while, on the belief that a join on
 * the primary key has one plan: on a small or new outbox its plan was a sequential scan (see
 * settle.ts), cached while the table grew. Prepared: only the writer's INSERT (nothing to scan,
 * one plan; planning was most of its cost). The claim and the settle of published messages now
 * run in functions whose cached plans have their shape pinned (migration 011, sql/claim.ts), and
 * test/integration/dispatcher/claim-plan.test.ts and settle-plan.test.ts read those plans.
 *
 * Names derive from the text, so the same statement has the same name on every connection (`pg`
 * prepares a name once per connection and refuses the same name with a different text).
 */
const names = new Map<string, string>();

/** Marks `text` as worth preparing; returns it unchanged. Call once per statement text. */
export function preparable(text: string): string {
  if (!names.has(text)) names.set(text, `agent_outbox_${fnv1a64(text)}`);
  return text;
}

/** The prepared-statement name for `text`, or `undefined` when it was not marked preparable. */
export function statementName(text: string): string | undefined {
  return names.get(text);
}

/** FNV-1a, 64 bits, as 16 hex digits: collisions among a few hundred texts are out of reach. */
function fnv1a64(text: string): string {
  let hash = 0xcbf29ce484222325n;
  for (let i = 0; i < text.length; i++) {
    hash ^= BigInt(text.charCodeAt(i));
    hash = (hash * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return hash.toString(16).padStart(16, '0');
}
