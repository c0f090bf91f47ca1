import { fileURLToPath } from 'node:url';
import type { SqliteDriver } from '../../src/stores/sqlite/index.js';
import { startScript, type CliProcess } from './cli-process.js';

let driver: SqliteDriver = 'better-sqlite3';

/**
 * The driver the SQLite store tests open their files with (`openSqlite(path, { driver:
 * sqliteDriver() })`): better-sqlite3, unless the test file that imports them set another first
 * (test/integration/stores/sqlite/libsql.test.ts runs them again through libsql).
 */
export function sqliteDriver(): SqliteDriver {
  return driver;
}

/** Sets what {@link sqliteDriver} returns, for the test files imported after. */
export function useSqliteDriver(next: SqliteDriver): void {
  driver = next;
}

/**
 * Is the optional peer `libsql` installed and loadable here (its prebuilt binary for this
 * platform)? False with a printed reason when not, so the libsql suites are skipped locally;
 * under `CI=true` a throw, so CI without it fails instead of passing silently.
 */
export async function requireLibsql(): Promise<boolean> {
  try {
    const { default: Database } = await import('libsql');
    new Database(':memory:').close();
    return true;
  } catch (error) {
    const reason = `libsql cannot be loaded (${error instanceof Error ? error.message : String(error)}): npm install libsql`;
    if (process.env.CI === 'true') throw new Error(`${reason}, and CI=true requires it`);
    console.warn(`[agent-outbox tests] SKIPPING libsql tests: ${reason}`);
    return false;
  }
}

const script = fileURLToPath(new URL('./libsql-dispatch.ts', import.meta.url));

/**
 * `outbox dispatch` on a SQLite file through libsql instead of better-sqlite3, in its own OS
 * process: the CLI's own dispatch command (src/cli/sqlite/sqlite-dispatch.ts) with the other
 * driver. `args` as for startCli (`dispatchArgs(...)`).
 */
export function startLibsqlDispatch(args: string[]): CliProcess {
  return startScript(script, args);
}
