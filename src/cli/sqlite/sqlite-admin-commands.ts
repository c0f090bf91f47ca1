import { migrateSqlite } from '../../stores/sqlite/migrate-sqlite.js';
import { openSqlite } from '../../stores/sqlite/open-sqlite.js';
import {
  listSqliteDeadLetters,
  readSqliteStatus,
  replaySqliteDeadLetters,
} from '../../stores/sqlite/sqlite-admin.js';
import { pruneSqliteOutbox } from '../../stores/sqlite/sqlite-retention.js';
import { sqliteFilePath } from '../../stores/sqlite/sqlite-url.js';
import { storeAdminCommands } from '../stores/store-admin-commands.js';

const SQLITE_HELP = `On a SQLite file (--database-url file:./agent.db or sqlite:./agent.db):
  outbox migrate                 create or upgrade the outbox tables
  outbox status [--errors N]     backlog, oldest age, dead letters, last errors
  outbox dead list [--topic GLOB] [--limit N]
  outbox replay <id...> | --all-dead [--topic GLOB]
  outbox prune --older-than DUR [--batch-size N]
  outbox dispatch --publisher URL [--once] (outbox dispatch --database-url file:x.db --help)
Every command takes --json.
`;

/**
 * `outbox migrate | status | dead list | replay | prune` on a SQLite file: the shared store
 * commands (stores/store-admin-commands.ts) over the SQLite store's calls, which are synchronous.
 */
export function sqliteAdminCommands(url: string) {
  return storeAdminCommands(async (purpose) => {
    const db = await openSqlite(url, { mustExist: purpose !== 'migrate' });
    const sync = <T>(fn: () => T) => Promise.resolve().then(fn);
    return {
      where: `the SQLite file ${sqliteFilePath(url)}`,
      migrate: (onMigration) => sync(() => migrateSqlite(db, onMigration)),
      status: (lastErrors) => sync(() => readSqliteStatus(db, { lastErrors })),
      deadLetters: (options) => sync(() => listSqliteDeadLetters(db, options)),
      replay: (selection) => sync(() => replaySqliteDeadLetters(db, selection)),
      prune: (olderThanMs, batchSize) =>
        sync(() => pruneSqliteOutbox(db, { olderThanMs, batchSize })),
      close: () => sync(() => void db.close()),
    };
  }, SQLITE_HELP);
}
