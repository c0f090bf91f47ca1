/**
 * Names for prepared statements, derived from the statement text so the same text always gets
 * the same name on every connection (`pg` prepares a name once per connection and refuses the
 * same name with a different text).
 *
 * Bounded: each connection keeps every statement it prepared until it closes, so an unbounded
 * set of texts (SQL built per call) would grow server memory without limit. Our statements are
 * a fixed set per schema; past {@link MAX_NAMED} distinct texts the rest run unnamed.
 */
const MAX_NAMED = 256;
const names = new Map<string, string>();

/** The prepared-statement name for `text`, or `undefined` once the bound is reached. */
export function statementName(text: string): string | undefined {
  const known = names.get(text);
  if (known !== undefined || names.size >= MAX_NAMED) return known;
  const name = `agent_outbox_${fnv1a64(text)}`;
  names.set(text, name);
  return name;
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
