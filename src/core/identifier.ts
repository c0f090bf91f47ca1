import { OutboxValidationError } from './errors.js';

// Lower-case only: a name that needs quoting to keep its case is a name someone will later type
// without quotes and miss. 63 bytes is Postgres' NAMEDATALEN - 1.
const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * Validates a schema (or table) name and returns it double-quoted for SQL. Every identifier that
 * reaches SQL text goes through here; values always go through parameters.
 */
export function quoteIdentifier(name: string, field = 'schema'): string {
  if (typeof name !== 'string' || !IDENTIFIER.test(name)) {
    throw new OutboxValidationError(
      field,
      `"${String(name)}" is not a valid identifier: use 1-63 characters of a-z, 0-9 and _, not starting with a digit`,
    );
  }
  return `"${name}"`;
}

/** Default schema: `public`, so the reference design's unqualified `outbox` SQL keeps working. */
export const DEFAULT_SCHEMA = 'public';
