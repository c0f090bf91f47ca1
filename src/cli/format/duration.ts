import { UsageError } from '../usage-error.js';

const UNITS: Record<string, number> = {
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
};

/**
 * Parses a duration flag such as `30d`, `14d`, `12h`, `90m`, `45s`, `500ms` (or a combination
 * like `1d12h`) into milliseconds. A bare number is refused: `--older-than 30` could mean days or
 * seconds, and guessing wrong deletes data.
 */
export function parseDuration(flag: string, value: string): number {
  const text = value.trim();
  const part = /(\d+(?:\.\d+)?)(ms|s|m|h|d|w)/gy;
  let total = 0;
  let matched = 0;
  for (let m = part.exec(text); m; m = part.exec(text)) {
    total += Number(m[1]) * UNITS[m[2]!]!;
    matched = part.lastIndex;
  }
  if (text === '' || matched !== text.length || !Number.isFinite(total))
    throw new UsageError(
      `--${flag} must be a duration like 30d, 12h, 90m or 45s (units ms s m h d w), got "${value}"`,
    );
  return total;
}

/** Formats milliseconds the way {@link parseDuration} reads them, largest unit first (`1d12h`). */
export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  let rest = Math.round(ms);
  const out: string[] = [];
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1_000],
    ['ms', 1],
  ] as const) {
    if (rest >= size) {
      out.push(`${Math.floor(rest / size)}${unit}`);
      rest %= size;
    }
  }
  return out.join('');
}
