import { OutboxValidationError } from '../core/errors.js';

/**
 * Tenant globs (`tenant_*`): `*` is any run of characters, `?` one character, everything else is
 * literal. Matched server-side as a LIKE pattern (so discovery and the activity probe read only
 * matching rows) and again here (so `_` in a name is literal, not LIKE's any-character).
 */
export function checkGlob(flag: string, glob: string): void {
  if (typeof glob !== 'string' || glob.length === 0)
    throw new OutboxValidationError(flag, 'must be a non-empty glob such as "tenant_*"');
  if (glob.length > 63)
    throw new OutboxValidationError(
      flag,
      `is ${glob.length} characters; a PostgreSQL name has at most 63`,
    );
}

/** The glob as a LIKE pattern with `\` as its escape character. */
export function globToLike(glob: string): string {
  let like = '';
  for (const ch of glob) {
    if (ch === '*') like += '%';
    else if (ch === '?') like += '_';
    else if (ch === '%' || ch === '_' || ch === '\\') like += `\\${ch}`;
    else like += ch;
  }
  return like;
}

/** A predicate that tells whether a name matches the glob, exactly as {@link globToLike} does. */
export function globMatcher(glob: string): (name: string) => boolean {
  const source = [...glob]
    .map((ch) => (ch === '*' ? '.*' : ch === '?' ? '.' : ch.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('');
  const re = new RegExp(`^${source}$`, 's');
  return (name) => re.test(name);
}
