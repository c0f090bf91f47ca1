import { parseArgs, type ParseArgsConfig } from 'node:util';
import { UsageError } from './usage-error.js';

/**
 * `parseArgs` whose unknown-option error names the closest known flag: `--batchsize` →
 * "unknown option --batchsize (did you mean --batch-size?)", a usage error (exit 2).
 */
export function parseFlags<T extends ParseArgsConfig>(config: T): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config);
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code !== 'ERR_PARSE_ARGS_UNKNOWN_OPTION') throw error;
    const given = /'(-{1,2}[^']+)'/.exec((error as Error).message)?.[1];
    if (!given) throw error;
    const known = Object.keys(config.options ?? {});
    const suggestion = closest(given.replace(/^-+/, '').split('=')[0]!, known);
    throw new UsageError(
      `unknown option ${given}${suggestion ? ` (did you mean --${suggestion}?)` : ''}`,
    );
  }
}

/** The known flag nearest `name` (edit distance, or the same letters without dashes), if close. */
function closest(name: string, known: readonly string[]): string | undefined {
  const plain = (s: string) => s.toLowerCase().replace(/[-_]/g, '');
  let best: { flag: string; distance: number } | undefined;
  for (const flag of known) {
    const distance = plain(flag) === plain(name) ? 0 : levenshtein(name.toLowerCase(), flag);
    if (!best || distance < best.distance) best = { flag, distance };
  }
  return best && best.distance <= Math.max(2, Math.floor(name.length / 4)) ? best.flag : undefined;
}

function levenshtein(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(
        previous[j]! + 1,
        current[j - 1]! + 1,
        previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    }
    previous = current;
  }
  return previous[b.length]!;
}
