import { assertSqliteSchemaCurrent } from '../../stores/sqlite/migrate-sqlite.js';
import { openSqlite } from '../../stores/sqlite/open-sqlite.js';
import { readSqliteStatus } from '../../stores/sqlite/sqlite-admin.js';
import { createSqliteDispatcher } from '../../stores/sqlite/sqlite-dispatcher.js';
import { pruneSqliteOutbox } from '../../stores/sqlite/sqlite-retention.js';
import { positiveInt } from '../flags.js';
import { STORE_DISPATCH_OPTIONS_HELP, storeDispatchCommand } from '../stores/store-dispatch.js';

export const sqliteDispatchHelp = `Usage: outbox dispatch --database-url file:./agent.db --publisher URL [options]

The polling dispatcher on a SQLite file (also sqlite:./agent.db). Several may run on one file:
leases keep them apart. No LISTEN/NOTIFY on SQLite: new messages are found by polling.

Options:
${STORE_DISPATCH_OPTIONS_HELP}  --busy-timeout-ms N      wait this long for another process's write lock (default 10000)
`;

/** `outbox dispatch` on a SQLite file: the shared store dispatch command (stores/store-dispatch.ts). */
export function sqliteDispatchCommand(url: string, argv: string[]): Promise<number> {
  return storeDispatchCommand(argv, {
    help: sqliteDispatchHelp,
    extraFlags: ['busy-timeout-ms'],
    async open(values) {
      const db = await openSqlite(url, {
        busyTimeoutMs: positiveInt('busy-timeout-ms', values['busy-timeout-ms'], 10_000),
        mustExist: true,
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
