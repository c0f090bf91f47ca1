import type { PublisherFromUrlOptions } from '../../publishers/from-url.js';
import { invalidSubjectReason } from '../../publishers/nats/jetstream-stream.js';
import {
  NatsJetStreamPublisher,
  type NatsStreamReport,
} from '../../publishers/nats/nats-jetstream-publisher.js';
import type { Publisher } from '../../publishers/publisher.js';
import { listFlag } from '../flags.js';
import { UsageError } from '../usage-error.js';

/**
 * `outbox dispatch --nats-stream NAME [--nats-subjects LIST]`: the stream to publish into, used
 * as it is when it exists (an operator's stream is never changed), created with LIST when not.
 */

/** The command's log function, as far as this file uses it. */
type Log = (level: 'info' | 'warn', message: string, fields?: Record<string, unknown>) => void;

/** The flags as parsed, and what they become. */
export interface NatsStreamFlags {
  /** `--nats-stream`. */
  natsStream?: string;
  /** `--nats-subjects`, split on commas and trimmed. */
  natsStreamSubjects?: string[];
}

/**
 * Checks `--nats-stream` and `--nats-subjects` before anything connects, so that a typo is a
 * usage error (exit 2) and not a stream of failed publishes.
 */
export function parseNatsStreamFlags(flags: {
  publisher: string | undefined;
  stream: string | undefined;
  subjects: readonly string[] | undefined;
}): NatsStreamFlags {
  const parsed: NatsStreamFlags = {};
  if (flags.stream !== undefined) {
    // The characters JetStream refuses in a stream name (it is part of API subjects).
    if (!/^[^\s.*>/\\]+$/.test(flags.stream))
      throw new UsageError(
        `--nats-stream must be a stream name without spaces, ".", "*", ">" or slashes, got "${flags.stream}"`,
      );
    parsed.natsStream = flags.stream;
  }
  if (flags.subjects === undefined) return parsed;
  if (flags.stream === undefined || !/^nats:/i.test(flags.publisher ?? ''))
    throw new UsageError(
      '--nats-subjects needs --publisher nats://… and --nats-stream NAME: they are the subjects the dispatcher creates that stream with',
    );
  const subjects = listFlag(flags.subjects);
  if (subjects.length === 0)
    throw new UsageError('--nats-subjects needs at least one subject, e.g. orders.created');
  for (const subject of subjects) {
    const reason = invalidSubjectReason(subject);
    if (reason) throw new UsageError(`--nats-subjects: "${subject}" ${reason}`);
  }
  parsed.natsStreamSubjects = subjects;
  return parsed;
}

/** The `createPublisherFromUrl` options for the flags: a subject outside the stream is logged. */
export function natsPublisherOptions(
  flags: NatsStreamFlags,
  log: Log,
): Pick<PublisherFromUrlOptions, 'natsStream' | 'natsStreamSubjects' | 'natsOnUncoveredSubject'> {
  if (flags.natsStream === undefined) return {};
  return {
    ...flags,
    // Once per subject: the dead-letter lines that follow carry the same text per message.
    natsOnUncoveredSubject: ({ error, stream, subject }) => log('warn', error, { stream, subject }),
  };
}

/**
 * Logs the stream a `--publisher nats://… --nats-stream` dispatcher publishes into, read at
 * startup and left as it is. The topics are not known before messages arrive; a subject outside
 * the stream is logged when first seen (see {@link natsPublisherOptions}).
 */
export async function logNatsStream(publisher: Publisher, log: Log): Promise<void> {
  if (!(publisher instanceof NatsJetStreamPublisher)) return;
  let report: NatsStreamReport | undefined;
  try {
    report = await publisher.inspectStream();
  } catch (error) {
    log('warn', 'NATS stream not checked at startup; publishes retry until it can be reached', {
      error: (error as Error).message,
    });
    return;
  }
  if (report)
    log('info', describeStream(report), { stream: report.name, subjects: report.subjects });
}

/** One line on what the dispatcher will do with the stream. */
export function describeStream(report: NatsStreamReport): string {
  const subjects = report.subjects.join(', ');
  if (!report.exists) {
    return report.growsWithTopics
      ? `NATS stream ${report.name} does not exist: the first publish creates it, with one subject per topic's first segment (mail.send → mail.>)`
      : `NATS stream ${report.name} does not exist: the first publish creates it with subjects ${subjects}`;
  }
  if (!report.createdByDispatcher) {
    return `NATS stream ${report.name}: subjects ${subjects || '(none)'}; not created by the dispatcher, so used as it is and never changed (a topic outside these subjects is dead-lettered)`;
  }
  return report.growsWithTopics
    ? `NATS stream ${report.name}: subjects ${subjects}; created by the dispatcher, grows with the topics`
    : `NATS stream ${report.name}: subjects ${subjects}; created by the dispatcher (a topic outside these subjects is dead-lettered)`;
}
