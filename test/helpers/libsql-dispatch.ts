// `outbox dispatch --database-url file:… …` with the file opened through libsql (the CLI opens it
// with better-sqlite3): started by startLibsqlDispatch (libsql.ts) for the kill -9 tests.
import { sqliteDispatchCommand } from '../../src/cli/sqlite/sqlite-dispatch.js';
import { databaseUrlOf } from '../../src/cli/stores/database-url-of.js';

const [command, ...argv] = process.argv.slice(2);
const url = databaseUrlOf(argv);
if (command !== 'dispatch' || url === undefined)
  throw new Error('usage: libsql-dispatch.ts dispatch --database-url file:… [options]');
process.exitCode = await sqliteDispatchCommand(url, argv, 'libsql');
