/**
 * Progress lines for long CLI operations. On a TTY one line is rewritten in place; otherwise
 * (logs, CI, pipes) a line is printed at most every `everyMs`, plus the final one, so a long run
 * shows it is alive without flooding the log.
 */
export interface Progress {
  /** Reports the current state; dropped when a line was printed less than `everyMs` ago. */
  update(text: string): void;
  /** Prints the final state on its own line. */
  done(text: string): void;
}

/** Creates a {@link Progress} writing to `stream` (default stderr, so stdout stays parseable). */
export function createProgress(
  options: { stream?: NodeJS.WriteStream; everyMs?: number; enabled?: boolean } = {},
): Progress {
  const stream = options.stream ?? process.stderr;
  const everyMs = options.everyMs ?? 1_000;
  const enabled = options.enabled ?? true;
  const tty = stream.isTTY === true;
  let last = 0;
  return {
    update(text) {
      if (!enabled) return;
      const now = Date.now();
      if (now - last < (tty ? 100 : everyMs)) {
        return;
      }
      last = now;
      stream.write(tty ? `\r\x1b[2K${text}` : `${text}\n`);
    },
    done(text) {
      if (!enabled) return;
      stream.write(tty ? `\r\x1b[2K${text}\n` : `${text}\n`);
    },
  };
}
