import { isSqliteUrl } from '../../stores/sqlite/sqlite-url.js';
import { UsageError } from '../usage-error.js';
import {
  sqliteDeadCommand,
  sqliteMigrateCommand,
  sqlitePruneCommand,
  sqliteReplayCommand,
  sqliteStatusCommand,
} from './sqlite-admin-commands.js';
import { sqliteDispatchCommand } from './sqlite-dispatch.js';

type Command = (argv: string[]) => Promise<number>;

/** The commands that run on a SQLite file, by name. */
const SQLITE_COMMANDS: Record<string, (url: string, argv: string[]) => Promise<number>> = {
  migrate: sqliteMigrateCommand,
  dispatch: sqliteDispatchCommand,
  status: sqliteStatusCommand,
  dead: sqliteDeadCommand,
  replay: sqliteReplayCommand,
  prune: sqlitePruneCommand,
};

/** The `--database-url` of `argv` (either `--database-url X` or `--database-url=X`), else `DATABASE_URL`. */
function databaseUrlOf(argv: readonly string[]): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--database-url') return argv[i + 1];
    if (arg.startsWith('--database-url=')) return arg.slice('--database-url='.length);
  }
  return process.env.DATABASE_URL;
}

/**
 * The one place the CLI looks at a database URL's scheme: `file:` and `sqlite:` run the SQLite
 * commands, anything else the Postgres ones (undefined here). A command SQLite has no form of
 * (approvals, limits, backfill, the dashboard) is a usage error that says so.
 */
export function sqliteCommand(name: string, argv: readonly string[]): Command | undefined {
  const url = databaseUrlOf(argv);
  if (url === undefined || !isSqliteUrl(url)) return undefined;
  const command = SQLITE_COMMANDS[name];
  if (!command)
    return () => {
      throw new UsageError(
        `"outbox ${name}" needs Postgres; on a SQLite file the commands are ${Object.keys(SQLITE_COMMANDS).join(', ')}`,
      );
    };
  return (args) => command(url, args);
}
