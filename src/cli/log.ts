import { context, isSpanContextValid, trace, type SpanContext } from '@opentelemetry/api';
import { UsageError } from './usage-error.js';

/** Log line formats of the long-running commands (`dispatch`, `ui`). */
export type LogFormat = 'text' | 'json';

/** Environment variable that sets the log format when no flag does. */
export const LOG_FORMAT_ENV = 'OUTBOX_LOG_FORMAT';

/**
 * Writes one log line: `info` to stdout, `warn` and `error` to stderr. `fields` are the
 * structured part; `spanContext` names the trace the line belongs to when it is not the active
 * span's (a dead letter: the message's own trace).
 */
export type Log = (
  level: 'info' | 'warn' | 'error',
  message: string,
  fields?: Record<string, unknown>,
  spanContext?: SpanContext,
) => void;

/**
 * The format from `--log-format`, the older `--json` (the same as `--log-format json`), or
 * `$OUTBOX_LOG_FORMAT`, in that order; `text` by default.
 */
export function resolveLogFormat(
  flag: string | undefined,
  json: boolean,
  env: string | undefined,
): LogFormat {
  if (flag !== undefined) {
    if (flag !== 'text' && flag !== 'json')
      throw new UsageError(`--log-format must be text or json, got "${flag}"`);
    return flag;
  }
  if (json) return 'json';
  const fromEnv = env?.trim().toLowerCase();
  if (!fromEnv) return 'text';
  if (fromEnv !== 'text' && fromEnv !== 'json')
    throw new UsageError(`${LOG_FORMAT_ENV} must be text or json, got "${env}"`);
  return fromEnv;
}

/**
 * A {@link Log} in `format`.
 *
 * `json`: one object per line for log pipelines (Loki, CloudWatch, Datadog):
 * `{"time":"<ISO-8601>","level":"info","msg":"...","fields":{...},"trace_id":"...","span_id":"..."}`
 * — `fields` always there (maybe `{}`), `trace_id`/`span_id` only when the line belongs to a
 * trace (the active span, with tracing on; or the message's trace, for a dead letter).
 *
 * `text`: `<ISO-8601> <level> <message> key=value ...`, for people.
 */
export function createLogger(
  format: LogFormat,
  streams: { out: NodeJS.WritableStream; err: NodeJS.WritableStream } = {
    out: process.stdout,
    err: process.stderr,
  },
): Log {
  return (level, message, fields = {}, spanContext) => {
    const stream = level === 'info' ? streams.out : streams.err;
    const time = new Date().toISOString();
    if (format === 'json') {
      const line: Record<string, unknown> = { time, level, msg: message, fields };
      const ids = spanContext ?? trace.getSpan(context.active())?.spanContext();
      if (ids && isSpanContextValid(ids)) {
        line.trace_id = ids.traceId;
        line.span_id = ids.spanId;
      }
      stream.write(`${JSON.stringify(line)}\n`);
      return;
    }
    const extra = Object.entries(fields).map(
      ([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`,
    );
    stream.write(
      `${time} ${level.padEnd(5)} ${message}${extra.length ? ` ${extra.join(' ')}` : ''}\n`,
    );
  };
}
