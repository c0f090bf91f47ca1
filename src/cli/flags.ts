import { DEFAULT_SCHEMA } from '../core/identifier.js';
import { OutboxValidationError } from '../core/errors.js';
import { quoteIdentifier } from '../core/identifier.js';
import { UsageError } from './usage-error.js';

/** Checks `--schema` before connecting, so a typo is a usage error and not a DB error. */
export function validateSchemaFlag(schema: string): void {
  try {
    quoteIdentifier(schema);
  } catch (error) {
    if (error instanceof OutboxValidationError)
      throw new UsageError(`--schema ${error.message.replace(/^schema: /, '')}`);
    throw error;
  }
}

/** Parses a positive integer flag value, or throws a UsageError naming the flag. */
export function positiveInt(flag: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0)
    throw new UsageError(`--${flag} must be a positive integer, got "${value}"`);
  return n;
}

/**
 * The values of a list flag, repeatable or comma-separated or both (`--x a,b --x c` → `a b c`),
 * as `--unordered` reads them: trimmed, empty items dropped.
 */
export function listFlag(values: readonly string[] | undefined): string[] {
  return (values ?? [])
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter(Boolean);
}

/** Flags every database command takes, in `parseArgs` form. */
export const COMMON_OPTIONS = {
  'database-url': { type: 'string' },
  schema: { type: 'string', default: DEFAULT_SCHEMA },
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} as const;
