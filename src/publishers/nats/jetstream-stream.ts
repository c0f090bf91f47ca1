import type { NatsJetStreamManagerLike } from './nats-client.js';

/**
 * Keeps the publisher's JetStream stream able to store what it publishes ("creates the stream if
 * asked"). Two modes:
 *
 * - fixed subjects (given, or `<subjectPrefix>>` when there is a prefix): the stream is created
 *   with them if missing; an existing stream is never changed;
 * - no prefix and no subjects: the stream grows with the topics — `mail.send` adds `mail.>`,
 *   a one-segment topic `audit` adds `audit`. The alternative, one stream on `>`, would capture
 *   every subject of the server (other applications' included) and block every other stream
 *   whose subjects overlap it.
 *
 * Two publishers extending the stream at once can overwrite each other's update; the loser's
 * publish then finds no stream (`retryable`), {@link JetStreamStream.forget} drops its cache, and
 * the next attempt adds the subject again.
 */
export class JetStreamStream {
  readonly #manager: NatsJetStreamManagerLike;
  readonly #name: string;
  readonly #fixedSubjects: string[] | undefined;
  /** Subject patterns known to be in the stream's configuration. */
  readonly #covered = new Set<string>();
  #fixedEnsured = false;

  constructor(
    manager: NatsJetStreamManagerLike,
    name: string,
    fixedSubjects: string[] | undefined,
  ) {
    this.#manager = manager;
    this.#name = name;
    this.#fixedSubjects = fixedSubjects;
  }

  /** Makes sure the stream exists and, in growing mode, captures every one of `subjects`. */
  async ensure(subjects: readonly string[]): Promise<void> {
    if (this.#fixedSubjects) {
      if (this.#fixedEnsured) return;
      if ((await this.#subjects()) === undefined) {
        await this.#manager.streams.add({ name: this.#name, subjects: this.#fixedSubjects });
      }
      this.#fixedEnsured = true;
      return;
    }
    const wanted = [...new Set(subjects.map(subjectPattern))].filter((p) => !this.#covered.has(p));
    if (wanted.length === 0) return;
    const existing = await this.#subjects();
    const missing = wanted.filter(
      (pattern) => !(existing ?? []).some((s) => subjectCovers(s, pattern)),
    );
    if (existing === undefined) {
      await this.#manager.streams.add({ name: this.#name, subjects: missing });
    } else if (missing.length > 0) {
      await this.#manager.streams.update(this.#name, { subjects: [...existing, ...missing] });
    }
    for (const pattern of wanted) this.#covered.add(pattern);
  }

  /** Forgets what is known about `subject`, after a publish found no stream for it. */
  forget(subject: string): void {
    this.#covered.delete(subjectPattern(subject));
    this.#fixedEnsured = false;
  }

  /** The stream's subjects, or undefined when the stream does not exist. */
  async #subjects(): Promise<string[] | undefined> {
    try {
      const info = (await this.#manager.streams.info(this.#name)) as {
        config?: { subjects?: string[] };
      };
      return info.config?.subjects ?? [];
    } catch (error) {
      if (isNotFound(error)) return undefined;
      throw error;
    }
  }
}

/** `mail.send` → `mail.>`; `audit` → `audit`. */
export function subjectPattern(subject: string): string {
  const dot = subject.indexOf('.');
  return dot === -1 ? subject : `${subject.slice(0, dot)}.>`;
}

/** Does the NATS subject filter `filter` (with `*` and `>`) capture everything `pattern` does? */
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

/** JetStream "stream not found" (API error 10059). */
export function isNotFound(error: unknown): boolean {
  const e = error as { code?: unknown; api_error?: { err_code?: number } } | null;
  return e?.api_error?.err_code === 10059 || e?.code === '404' || e?.code === 404;
}
