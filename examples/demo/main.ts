/**
 * `npm start`: the quick-start demo. No server, no API key.
 *
 * - `npm start` runs the agent's orders story on an embedded Postgres (PGlite): pglite.ts.
 * - `npm start -- --sqlite` runs the same story on `agent-outbox/sqlite`, on a SQLite file in a
 *   temporary directory: sqlite.ts (no tool-call ledger or approval holds there: see its header).
 *
 * Each prints what happens and a summary with checks; the exit code is 1 if any check fails.
 */
const flags = process.argv.slice(2);
const unknown = flags.filter((flag) => flag !== '--sqlite');
if (unknown.length > 0) {
  console.error(`unknown option ${unknown.join(' ')}; usage: npm start [-- --sqlite]`);
  process.exitCode = 2;
} else if (flags.includes('--sqlite')) await import('./sqlite.js');
else await import('./pglite.js');
