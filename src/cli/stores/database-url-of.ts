/**
 * The `--database-url` of `argv` (either `--database-url X` or `--database-url=X`), else
 * `DATABASE_URL`: how the CLI picks a store (SQLite, MySQL) before parsing a command's flags.
 */
export function databaseUrlOf(argv: readonly string[]): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--database-url') return argv[i + 1];
    if (arg.startsWith('--database-url=')) return arg.slice('--database-url='.length);
  }
  return process.env.DATABASE_URL;
}
