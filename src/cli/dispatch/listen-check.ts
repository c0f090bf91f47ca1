import pg from 'pg';
import { probeListen } from '../../dispatcher/wake/listen-probe.js';
import type { SqlExecutor } from '../../store/sql-executor.js';
import { redactUrl } from '../database.js';
import type { Log } from '../log.js';
import { UsageError } from '../usage-error.js';
import type { ConnectionSettings } from './runners.js';

/**
 * `--listen-url`: where the LISTEN connection goes when `--database-url` is a pooler's. Checked
 * here, not by resolveDatabaseUrl, which names `--database-url` in its errors.
 */
export function parseListenUrl(value: string | undefined, listening: boolean): string | undefined {
  if (value === undefined) return undefined;
  if (!listening)
    throw new UsageError(
      '--listen-url is where the LISTEN wake-ups of a long-running poll dispatcher connect: drop it with --no-listen, --once or --mode cdc',
    );
  if (!/^postgres(ql)?:\/\//.test(value))
    throw new UsageError(
      `--listen-url must be a PostgreSQL URL (postgres://user:password@host:5432/database), got ${redactUrl(value)}`,
    );
  return value;
}

/**
 * Before the wake source starts: does LISTEN through `listenUrl` hear a NOTIFY sent through the
 * dispatcher's pool (listen-probe.ts)? False, with a warning that says what to pass, when it
 * does not — a transaction pooler in front of `listenUrl` — so the dispatcher runs as with
 * `--no-listen` instead of waiting on a LISTEN that never wakes it. True when it does, and when
 * the probe could not run (the wake source reports and retries its own connection).
 */
export async function listenWorks(args: {
  listenUrl: string;
  flag: '--database-url' | '--listen-url';
  notify: SqlExecutor;
  connection: ConnectionSettings;
  pollIntervalMs: number;
  log: Log;
}): Promise<boolean> {
  try {
    const { delivered, waitedMs } = await probeListen({
      notify: args.notify,
      connect: async () => {
        const client = new pg.Client({
          connectionString: args.listenUrl,
          ...args.connection,
          application_name: 'agent-outbox-listen-probe',
        });
        client.on('error', () => undefined);
        await client.connect();
        return client;
      },
    });
    if (delivered) return true;
    args.log(
      'warn',
      `LISTEN through ${args.flag} ${redactUrl(args.listenUrl)} heard nothing within ${waitedMs} ms: a connection pooler in transaction mode (PgBouncer, Supavisor on port 6543, Neon's -pooler endpoint) is in front of it, and wake-ups need a direct connection. Pass --listen-url with a direct URL to the same database (keep the pooler's URL in --database-url), or --no-listen. Running as with --no-listen: polling every ${args.pollIntervalMs} ms.`,
    );
    return false;
  } catch (error) {
    args.log('warn', 'could not check LISTEN before starting; listening anyway', {
      error: (error as Error).message,
    });
    return true;
  }
}
