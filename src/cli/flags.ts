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

/** Parses a number flag that may be 0 or a fraction (a delay), or throws naming the flag. */
export function nonNegativeNumber(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0)
    throw new UsageError(`--${flag} must be a number >= 0, got "${value}"`);
  return n;
}

/**
 * Parses a TCP port flag (1–65535; 0 too where `allowZero`, for "any free port"), or throws
 * naming the flag: a port past 65535 would otherwise surface as a listen error at start-up.
 */
export function portFlag(
  flag: string,
  value: string | undefined,
  options: { allowZero?: boolean } = {},
): number | undefined {
  if (value === undefined) return undefined;
  const port = options.allowZero && value === '0' ? 0 : positiveInt(flag, value, 0);
  if (port > 65_535) throw new UsageError(`--${flag} must be at most 65535, got ${port}`);
  return port;
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
