import type { NatsJetStreamManagerLike } from './nats-client.js';

/**
 * The `description` of every stream the publisher creates, and the only way a later publisher
 * (another process, or this one after a restart) can tell "ours: may grow with the topics" from
 * "the operator's: never touched". JetStream records no creator, and stream metadata needs
 * nats-server 2.10 (2.9 is what we test against). An operator who edits the description takes
 * the stream over; a stream created by agent-outbox before this marker existed counts as theirs.
 */
export const CREATED_BY_DISPATCHER = 'agent-outbox: created by the dispatcher';

/**
 * The publisher's stream as read at one moment, left as it was (what
 * `NatsJetStreamPublisher.inspectStream()` returns and `outbox dispatch` logs at startup).
 */
export interface NatsStreamReport {
  /** The stream's name. */
  name: string;
  /** False when no stream of that name exists (yet). */
  exists: boolean;
  /** True when the stream carries {@link CREATED_BY_DISPATCHER} in its description. */
  createdByDispatcher: boolean;
  /**
   * The stream's subjects; for a missing stream, those it will be created with (empty when they
   * come from the topics published).
   */
  subjects: string[];
  /** True when the publisher adds subjects to this stream as new topics arrive. */
  growsWithTopics: boolean;
}

/**
 * The publisher's JetStream stream (`stream` option): makes sure a stream captures what is
 * published to it, without ever changing a stream the dispatcher did not create (issue 17).
 *
 * - Missing: created, with the fixed subjects (given, or `<subjectPrefix>>` when there is a
 *   prefix) or, with neither, one subject per topic's first segment (`mail.send` → `mail.>`,
 *   `audit` → `audit`). The alternative, one stream on `>`, would capture every subject of the
 *   server (other applications' included) and block every other stream whose subjects overlap it.
 * - Ours (created by a dispatcher, see {@link CREATED_BY_DISPATCHER}) and without fixed subjects:
 *   grows the same way as topics arrive.
 * - Anything else — above all an operator's stream — is read, never written: a subject it does not
 *   capture is reported by {@link JetStreamStream.uncovered}, and the publisher turns that into a
 *   `permanent` outcome. Widening the operator's `orders.created` to `orders.>` and updating the
 *   stream was the bug: NATS refuses it (`subject "orders.created" overlaps with "orders.>"`), and
 *   it was not ours to change anyway.
 *
 * Only subjects found captured are cached; an uncaptured one reads the stream again on its next
 * call, so an operator's fix takes effect at once. Two publishers growing the stream at once can
 * overwrite each other's update; the loser's publish then finds no stream (`retryable`),
 * {@link JetStreamStream.forget} drops the cached subject, and the next attempt adds it again.
 */
export class JetStreamStream {
  readonly #manager: NatsJetStreamManagerLike;
  readonly #name: string;
  readonly #fixedSubjects: string[] | undefined;
  /** Concrete subjects known to be captured by the stream. */
  readonly #captured = new Set<string>();
  /** The stream's subjects as last read, for error messages. */
  #subjects: string[] = [];

  constructor(
    manager: NatsJetStreamManagerLike,
    name: string,
    fixedSubjects: string[] | undefined,
  ) {
    this.#manager = manager;
    this.#name = name;
    this.#fixedSubjects = fixedSubjects;
  }

  /** The stream's name. */
  get name(): string {
    return this.#name;
  }

  /** The stream's subjects as last read (empty before the first read). */
  get subjects(): readonly string[] {
    return this.#subjects;
  }

  /**
   * Creates the stream if missing, grows it if it is ours and growing, and returns the members of
   * `subjects` it still does not capture (empty: all can be published).
   */
  async uncovered(subjects: readonly string[]): Promise<string[]> {
    const pending = [...new Set(subjects)].filter((s) => !this.#captured.has(s));
    if (pending.length === 0) return [];
    let stream = (await this.#read()) ?? (await this.#create(pending));
    if (stream.ours && this.#fixedSubjects === undefined)
      stream = await this.#grow(stream, pending);
    this.#subjects = stream.subjects;
    const uncovered: string[] = [];
    for (const subject of pending) {
      if (captures(stream.subjects, subject)) this.#captured.add(subject);
      else uncovered.push(subject);
    }
    return uncovered;
  }

  /** Reads the stream without creating or changing it. */
  async inspect(): Promise<NatsStreamReport> {
    const stream = await this.#read();
    if (stream === undefined) {
      return {
        name: this.#name,
        exists: false,
        createdByDispatcher: false,
        subjects: this.#fixedSubjects ?? [],
        growsWithTopics: this.#fixedSubjects === undefined,
      };
    }
    this.#subjects = stream.subjects;
    return {
      name: this.#name,
      exists: true,
      createdByDispatcher: stream.ours,
      subjects: stream.subjects,
      growsWithTopics: stream.ours && this.#fixedSubjects === undefined,
    };
  }

  /** Forgets that `subject` was captured, after a publish to it found no stream. */
  forget(subject: string): void {
    this.#captured.delete(subject);
  }

  async #create(subjects: readonly string[]): Promise<StreamView> {
    const config = {
      name: this.#name,
      subjects: this.#fixedSubjects ?? [...new Set(subjects.map(subjectPattern))],
      description: CREATED_BY_DISPATCHER,
    };
    try {
      await this.#manager.streams.add(config);
    } catch (error) {
      // Another dispatcher (or the operator) created it a moment ago with other subjects ("name
      // already in use"): use the stream that won, under the same rules as any existing one.
      const existing = await this.#read();
      if (existing === undefined) throw error;
      return existing;
    }
    return { subjects: config.subjects, ours: true };
  }

  async #grow(stream: StreamView, subjects: readonly string[]): Promise<StreamView> {
    const missing = [...new Set(subjects.map(subjectPattern))].filter(
      (pattern) => !stream.subjects.some((s) => subjectCovers(s, pattern)),
    );
    if (missing.length === 0) return stream;
    const grown = [...stream.subjects, ...missing];
    await this.#manager.streams.update(this.#name, { subjects: grown });
    return { subjects: grown, ours: true };
  }

  /** The stream's subjects and owner, or undefined when the stream does not exist. */
  async #read(): Promise<StreamView | undefined> {
    try {
      const info = (await this.#manager.streams.info(this.#name)) as {
        config?: { subjects?: string[]; description?: string };
      };
      return {
        subjects: info.config?.subjects ?? [],
        ours: info.config?.description?.startsWith(CREATED_BY_DISPATCHER) ?? false,
      };
    } catch (error) {
      if (isNotFound(error)) return undefined;
      throw error;
    }
  }
}

interface StreamView {
  subjects: string[];
  /** Created by a dispatcher (description marker): the only kind of stream we may change. */
  ours: boolean;
}

/** Does any of the stream subjects `filters` capture the concrete subject `subject`? */
export function captures(filters: readonly string[], subject: string): boolean {
  return filters.some((filter) => subjectCovers(filter, subject));
}

/** `mail.send` → `mail.>`; `audit` → `audit`. */
export function subjectPattern(subject: string): string {
  const dot = subject.indexOf('.');
  return dot === -1 ? subject : `${subject.slice(0, dot)}.>`;
}

/**
 * Does the NATS subject filter `filter` capture everything `pattern` does? With NATS wildcard
 * semantics: `*` is exactly one token, `>` (last token only) one or more trailing tokens. A
 * concrete subject is a pattern without wildcards, so `subjectCovers('orders.created.>',
 * 'orders.created')` is false (`>` needs at least one more token) and `subjectCovers('orders.*',
 * 'orders.created')` is true.
 */
export function subjectCovers(filter: string, pattern: string): boolean {
  const f = filter.split('.');
  const p = pattern.split('.');
  for (let i = 0; i < f.length; i++) {
    if (f[i] === '>') return i < p.length;
    if (i >= p.length) return false;
    // A `>` in the pattern spans several tokens: only a `>` in the filter covers it.
    if (p[i] === '>') return false;
    if (f[i] !== '*' && f[i] !== p[i]) return false;
  }
  return f.length === p.length;
}

/**
 * Why `subject` is not a valid stream subject (filter), or undefined when it is: tokens are
 * non-empty and free of whitespace, `*` and `>` stand alone as tokens, `>` only last. Checked
 * before connecting so that a typo in `--nats-subjects` is a usage error, not a server error.
 */
export function invalidSubjectReason(subject: string): string | undefined {
  if (subject.length === 0) return 'is empty';
  if (/\s/.test(subject)) return 'contains whitespace';
  const tokens = subject.split('.');
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i]!;
    if (token.length === 0) return 'has an empty token';
    if (token.includes('>') && (token !== '>' || i !== tokens.length - 1)) {
      return '">" must be a whole token, and the last one';
    }
    if (token.includes('*') && token !== '*') return '"*" must be a whole token';
  }
  return undefined;
}

/** JetStream "stream not found" (API error 10059). */
export function isNotFound(error: unknown): boolean {
  const e = error as { code?: unknown; api_error?: { err_code?: number } } | null;
  return e?.api_error?.err_code === 10059 || e?.code === '404' || e?.code === 404;
}
