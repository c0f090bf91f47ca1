import { isSqliteUrl } from '../../stores/sqlite/sqlite-url.js';
import { databaseUrlOf } from '../stores/database-url-of.js';
import { storeCommand } from '../stores/store-route.js';
import { sqliteAdminCommands } from './sqlite-admin-commands.js';
import { sqliteDispatchCommand } from './sqlite-dispatch.js';

type Command = (argv: string[]) => Promise<number>;

/**
 * The CLI's route to SQLite: `file:` and `sqlite:` URLs run these commands, anything else is not
 * ours (undefined; mysql-route.ts and then Postgres are asked next).
 */
export function sqliteCommand(name: string, argv: readonly string[]): Command | undefined {
  const url = databaseUrlOf(argv);
  if (url === undefined || !isSqliteUrl(url)) return undefined;
  const admin = sqliteAdminCommands(url);
  return storeCommand(
    name,
    {
      migrate: admin.migrate,
      dispatch: (args) => sqliteDispatchCommand(url, args),
      status: admin.status,
      dead: admin.dead,
      replay: admin.replay,
      prune: admin.prune,
    },
    'on a SQLite file',
  );
}
