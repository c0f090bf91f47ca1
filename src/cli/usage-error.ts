/** A mistake in how the CLI was called: printed with a hint, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** Exit codes of the `outbox` CLI. */
export const EXIT = {
  ok: 0,
  /** The command ran and something failed (a message could not be published, a DB error). */
  failure: 1,
  /** The command line was wrong. */
  usage: 2,
} as const;
