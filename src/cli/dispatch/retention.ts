import type pg from 'pg';
import { createRetentionJob, poolSessions } from '../../retention/retention-job.js';
import { parseDuration } from '../format/duration.js';
import type { Log } from '../log.js';

/** The `--prune-*` flags of `outbox dispatch`, `--prune-older-than` parsed already. */
export interface DispatchRetentionFlags {
  schema: string;
  olderThanMs: number;
  archive: boolean;
  ledgerOlderThan: string | undefined;
  interval: string | undefined;
}

/**
 * Starts the retention job of a long-running `outbox dispatch` on `pool`, its runs logged.
 * Returns what stops it.
 */
export function startDispatchRetention(
  pool: pg.Pool,
  flags: DispatchRetentionFlags,
  log: Log,
): () => Promise<void> {
  const retention = createRetentionJob({
    connect: poolSessions(pool),
    schema: flags.schema,
    olderThanMs: flags.olderThanMs,
    archive: flags.archive,
    ledgerOlderThanMs:
      flags.ledgerOlderThan === undefined
        ? null
        : parseDuration('prune-ledger-older-than', flags.ledgerOlderThan),
    intervalMs:
      flags.interval === undefined ? 3_600_000 : parseDuration('prune-interval', flags.interval),
  });
  retention.on('retention:run:success', ({ outbox, ledger, durationMs }) =>
    log('info', 'retention run', {
      removed: outbox.removed,
      archived: outbox.archived,
      ledgerDeleted: ledger?.deleted ?? 0,
      durationMs,
    }),
  );
  retention.on('retention:run:skipped', () =>
    log('info', 'retention skipped: another process holds the retention lock'),
  );
  retention.on('retention:run:failure', ({ error }) =>
    log('error', 'retention run failed', { error: error.message }),
  );
  retention.start();
  return () => retention.stop();
}
