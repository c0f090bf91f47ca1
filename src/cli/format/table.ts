/** ANSI styling that turns itself off when output is not a terminal. */
export interface Colors {
  readonly enabled: boolean;
  red(text: string): string;
  yellow(text: string): string;
  green(text: string): string;
  dim(text: string): string;
  bold(text: string): string;
}

/**
 * Colours for `stream`: on when it is a TTY, unless `NO_COLOR` is set (https://no-color.org) or
 * `TERM=dumb`; `FORCE_COLOR=1` turns them on for a pipe (e.g. `| less -R`).
 */
export function colors(
  stream: { isTTY?: boolean } = process.stdout,
  env: NodeJS.ProcessEnv = process.env,
): Colors {
  const enabled =
    env.FORCE_COLOR !== undefined && env.FORCE_COLOR !== '0'
      ? true
      : stream.isTTY === true && env.NO_COLOR === undefined && env.TERM !== 'dumb';
  const wrap = (open: number, close: number) => (text: string) =>
    enabled ? `\x1b[${open}m${text}\x1b[${close}m` : text;
  return {
    enabled,
    red: wrap(31, 39),
    yellow: wrap(33, 39),
    green: wrap(32, 39),
    dim: wrap(2, 22),
    bold: wrap(1, 22),
  };
}

// eslint-disable-next-line no-control-regex
const ANSI = /\x1b\[[0-9;]*m/g;

/** Length as shown on a terminal: without colour codes. */
export function visibleLength(text: string): number {
  return text.replace(ANSI, '').length;
}

/**
 * Lays out rows as aligned columns (two spaces apart). Numbers read best right-aligned: pass
 * `align`. Cells may contain colour codes; widths ignore them. The last column is not padded,
 * so long error texts do not drag trailing spaces along.
 */
export function table(
  rows: readonly (readonly string[])[],
  options: {
    header?: readonly string[];
    align?: readonly ('left' | 'right')[];
    indent?: string;
  } = {},
): string {
  const all = options.header ? [options.header, ...rows] : rows;
  const columns = Math.max(0, ...all.map((r) => r.length));
  const widths = Array.from({ length: columns }, (_, c) =>
    Math.max(0, ...all.map((r) => visibleLength(r[c] ?? ''))),
  );
  const line = (row: readonly string[]) =>
    (options.indent ?? '') +
    row
      .map((cell, c) => {
        const pad = ' '.repeat(widths[c]! - visibleLength(cell));
        if (options.align?.[c] === 'right') return pad + cell;
        return c === row.length - 1 ? cell : cell + pad;
      })
      .join('  ');
  return all.map(line).join('\n');
}

/** Seconds as a short age: `0s`, `42.0s`, `3.5m`, `2.1h`, `3.0d`. */
export function formatAge(seconds: number): string {
  if (seconds < 1) return '0s';
  if (seconds < 120) return `${seconds.toFixed(1)}s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)}m`;
  if (seconds < 172_800) return `${(seconds / 3600).toFixed(1)}h`;
  return `${(seconds / 86_400).toFixed(1)}d`;
}

/** Cuts `text` to `max` characters with an ellipsis, on one line. */
export function truncate(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}
