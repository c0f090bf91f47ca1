import { OutboxValidationError } from '../core/errors.js';

/**
 * Turns topic globs into SQL LIKE patterns: `*` matches any run of characters (dots included),
 * everything else is literal (`%`, `_` and `\` are escaped). `mail.*` matches `mail.send` and
 * `mail.digest.weekly`; `*` matches every topic.
 */
export function globToLike(glob: string): string {
  if (typeof glob !== 'string' || glob.length === 0)
    throw new OutboxValidationError('unordered', 'a topic pattern must be a non-empty string');
  return glob.replace(/[\\%_]/g, (c) => `\\${c}`).replace(/\*/g, '%');
}

/** The same matching in JS, for code that must agree with the SQL (tests, routing). */
export function globMatches(glob: string, topic: string): boolean {
  const source = glob
    .split('*')
    .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
    .join('.*');
  return new RegExp(`^${source}$`, 's').test(topic);
}
