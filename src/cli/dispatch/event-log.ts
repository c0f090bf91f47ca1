import { spanContextFromHeaders } from '../../core/trace.js';
import type { DispatcherStats } from '../../dispatcher/dispatcher.js';
import { isReadOnlyError } from '../../dispatcher/read-only-watch.js';
import type { Log } from '../log.js';
import type { DispatchRunner } from './runners.js';

/** The log lines of `outbox dispatch` for what goes wrong, or changes, while it runs. */
export function logDispatcherEvents(dispatcher: DispatchRunner, log: Log): void {
  // A read-only spell is said once (below); its refused claims, one a poll, are not repeated.
  let readOnly = false;
  dispatcher.on('dispatcher:database:read-only', ({ error }) => {
    readOnly = true;
    log(
      'error',
      'database is read-only: claims and settles are refused (SQLSTATE 25006); messages wait, none is dead-lettered, and dispatch goes on by itself once it accepts writes. Check default_transaction_read_only, a maintenance window, or a failover that left this URL on a standby',
      { error: error.message },
    );
  });
  dispatcher.on('dispatcher:database:writable', ({ readOnlyMs }) => {
    readOnly = false;
    log('info', 'database accepts writes again; dispatch goes on', { readOnlyMs });
  });
  dispatcher.on('dispatcher:claim:failure', ({ error, retryInMs }) => {
    if (!(readOnly && isReadOnlyError(error)))
      log('error', 'claim failed', { error: error.message, retryInMs });
  });
  // In the batch's trace: named by the event (the CLI registers no async context manager).
  dispatcher.on('dispatcher:settle:failure', ({ error, messages, spanContext }) =>
    log(
      'error',
      'settle failed; messages will be published again after the lease expires',
      { error: error.message, messages },
      spanContext,
    ),
  );
  dispatcher.on('dispatcher:route:paused', ({ route, reason }) =>
    log('warn', 'route paused: its destination is down; messages wait without attempts', {
      route,
      reason,
    }),
  );
  dispatcher.on('dispatcher:route:resumed', ({ route }) => log('info', 'route resumed', { route }));
  // In the message's own trace (its traceparent), where whoever follows it will look.
  dispatcher.on('dispatcher:dead-letter', ({ message, error }) =>
    log(
      'warn',
      'dead-lettered',
      {
        id: message.id,
        topic: message.topic,
        aggregateId: message.aggregateId,
        attempts: message.attempts,
        error,
      },
      spanContextFromHeaders(message.headers),
    ),
  );
}

/** The counters a progress line shows. */
export function progress(stats: DispatcherStats): Record<string, number> {
  return {
    published: stats.published,
    retried: stats.retried,
    deadLettered: stats.deadLettered,
    fenced: stats.fenced,
    postponed: stats.postponed,
    batches: stats.batches,
  };
}
