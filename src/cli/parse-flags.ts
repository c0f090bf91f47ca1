import { parseArgs, type ParseArgsConfig } from 'node:util';
import { editDistance } from '../core/edit-distance.js';
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
    const distance = plain(flag) === plain(name) ? 0 : editDistance(name.toLowerCase(), flag);
    if (!best || distance < best.distance) best = { flag, distance };
  }
  return best && best.distance <= Math.max(2, Math.floor(name.length / 4)) ? best.flag : undefined;
}
