import { assertSqliteSchemaCurrent } from '../../stores/sqlite/migrate-sqlite.js';
import { openSqlite, type SqliteDriver } from '../../stores/sqlite/open-sqlite.js';
import { readSqliteStatus } from '../../stores/sqlite/sqlite-admin.js';
import { createSqliteDispatcher } from '../../stores/sqlite/sqlite-dispatcher.js';
import { pruneSqliteOutbox } from '../../stores/sqlite/sqlite-retention.js';
import { positiveInt } from '../flags.js';
import { UsageError } from '../usage-error.js';
import { STORE_DISPATCH_OPTIONS_HELP, storeDispatchCommand } from '../stores/store-dispatch.js';

export const sqliteDispatchHelp = `Usage: outbox dispatch --database-url file:./agent.db --publisher URL [options]

The polling dispatcher on a SQLite file (also sqlite:./agent.db). Several may run on one file:
leases keep them apart. No LISTEN/NOTIFY on SQLite: new messages are found by polling.

Options:
${STORE_DISPATCH_OPTIONS_HELP}  --busy-timeout-ms N      wait this long for another process's write lock (default 10000)
  --synchronous normal|full
                           normal (default): the dispatcher's own commits (leases, settles) do
                           not wait for the disk; a power cut may send their messages again.
                           full: a flush per commit. Producers' commits are never affected.
`;

/**
 * `outbox dispatch` on a SQLite file: the shared store dispatch command (stores/store-dispatch.ts).
 * `driver` is not a flag: the CLI opens files with better-sqlite3; the tests run this command
 * through libsql too (test/helpers/libsql-dispatch.ts).
 */
export function sqliteDispatchCommand(
  url: string,
  argv: string[],
  driver: SqliteDriver = 'better-sqlite3',
): Promise<number> {
  return storeDispatchCommand(argv, {
    help: sqliteDispatchHelp,
    extraFlags: ['busy-timeout-ms', 'synchronous'],
    async open(values) {
      const synchronous = values.synchronous ?? 'normal';
      if (synchronous !== 'normal' && synchronous !== 'full')
        throw new UsageError(`--synchronous must be normal or full, got "${synchronous}"`);
      const db = await openSqlite(url, {
        busyTimeoutMs: positiveInt('busy-timeout-ms', values['busy-timeout-ms'], 10_000),
        mustExist: true,
        driver,
      });
      return {
        label: `SQLite ${db.name}`,
        assertSchemaCurrent: () => assertSqliteSchemaCurrent(db),
        createDispatcher: (options) => createSqliteDispatcher({ ...options, database: db }),
        readStatus: () => readSqliteStatus(db, { lastErrors: 1 }),
        prune: (olderThanMs) => pruneSqliteOutbox(db, { olderThanMs }),
        close: () => {
          db.close();
        },
      };
    },
  });
}
