import { UsageError } from '../usage-error.js';

type Command = (argv: string[]) => Promise<number>;

/**
 * The store's command called `name`, or — for a command the store has no form of (approvals,
 * limits, backfill, the dashboard) — one that fails with a usage error saying so. `where` names
 * the store in that error (`on a SQLite file`).
 */
export function storeCommand(
  name: string,
  commands: Record<string, Command>,
  where: string,
): Command {
  const command = commands[name];
  if (command) return command;
  return () => {
    throw new UsageError(
      `"outbox ${name}" needs Postgres; ${where} the commands are ${Object.keys(commands).join(', ')}`,
    );
  };
}
