import { spanContextFromHeaders } from '../../core/trace.js';
import type { DispatcherStats } from '../../dispatcher/dispatcher.js';
import type { Log } from '../log.js';
import type { DispatchRunner } from './runners.js';

/** The log lines of `outbox dispatch` for what goes wrong, or changes, while it runs. */
export function logDispatcherEvents(dispatcher: DispatchRunner, log: Log): void {
  dispatcher.on('dispatcher:claim:failure', ({ error, retryInMs }) =>
    log('error', 'claim failed', { error: error.message, retryInMs }),
  );
  dispatcher.on('dispatcher:settle:failure', ({ error, messages }) =>
    log('error', 'settle failed; messages will be published again after the lease expires', {
      error: error.message,
      messages,
    }),
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
