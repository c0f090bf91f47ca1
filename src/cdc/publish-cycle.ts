import { quoteIdentifier } from '../core/identifier.js';
import { toError } from '../core/errors.js';
import type { Dispatcher } from '../dispatcher/dispatcher.js';
import type { TypedEmitter } from '../dispatcher/events.js';
import type { QueryOptions } from '../store/sql-executor.js';
import { candidateStatesSql, nextDueSql } from '../sql/cdc.js';
import type { CandidateStore } from './candidate-store.js';
import { classifyCandidates, type CandidateState } from './classify.js';
import type { CdcEventMap } from './events.js';
import type { CdcDispatcherOptions } from './options.js';

/** Under continuous load, candidate states are read (and positions confirmed) this often. */
const CLASSIFY_EVERY_MS = 100;
/**
 * Candidates whose state one query reads (see #classify): the oldest ones, which are what holds
 * the confirmed position back. A primary-key probe each, and one probe per aggregate among them
 * (sql/cdc.ts): about 500 rows read.
 */
const CLASSIFY_SLICE = 500;

/** What a {@link PublishCycle} works with: the CDC dispatcher's parts and callbacks. */
export interface PublishCycleParts {
  options: CdcDispatcherOptions;
  schema: string;
  /** The candidates (rows streamed, not settled yet) and the store the worker claims through. */
  store: CandidateStore;
  /** The polling dispatcher, never started, whose drain() publishes what is due. */
  worker: Dispatcher;
  events: TypedEmitter<CdcEventMap>;
  /** True while the CDC dispatcher is `running`: no cycle or wake-up is set otherwise. */
  running: () => boolean;
  /** Marks a candidate's WAL position resolved (the current confirm tracker's). */
  resolve: (rowId: string) => void;
  /** After each cycle: confirm what it resolved, resume a paused stream. */
  afterCycle: () => Promise<void>;
  /** A statement of the cycle failed: lets go of the stream if the database is going away. */
  onDatabaseError: (error: unknown) => void;
}

/**
 * The CDC dispatcher's publish cycles: one at a time, started by a commit, a due time or the
 * re-check timer; each publishes what is due and finds out where the candidates left stand.
 */
export class PublishCycle {
  readonly #parts: PublishCycleParts;
  readonly #statesSql: string;
  readonly #nextDueSql: string;
  readonly #queryOptions: QueryOptions | undefined;
  #cycle: Promise<void> | undefined;
  #again = false;
  #nextCycle: NodeJS.Timeout | undefined;
  /** The wake-up at the next due time (see wakeAtDue), apart from the re-check timer. */
  #dueTimer: NodeJS.Timeout | undefined;
  #dueAt = Infinity;
  /** The cycle about to run was started by #dueTimer: claim even without candidates. */
  #dueWake = false;
  #classifiedAt = 0;
  /** Candidates the state query did not find, since when (see #classify). */
  readonly #missingSince = new Map<string, number>();

  constructor(parts: PublishCycleParts, queryOptions: QueryOptions | undefined) {
    this.#parts = parts;
    this.#statesSql = candidateStatesSql(quoteIdentifier(parts.schema));
    this.#nextDueSql = nextDueSql(quoteIdentifier(parts.schema));
    this.#queryOptions = queryOptions;
  }

  /** The cycle running now, if any. */
  get current(): Promise<void> | undefined {
    return this.#cycle;
  }

  /** Settles resolved these candidates: they are no longer candidates, their positions resolved. */
  resolved(rowIds: string[]): void {
    for (const id of rowIds) {
      this.#parts.store.candidates.delete(id);
      this.#missingSince.delete(id);
      this.#parts.resolve(id);
    }
  }

  /** On stop: no re-check and no due wake-up any more. */
  clearTimers(): void {
    clearTimeout(this.#nextCycle);
    clearTimeout(this.#dueTimer);
  }

  /** Runs a cycle now, or right after the running one (never two at once). */
  kick(): void {
    if (!this.#parts.running()) return;
    if (this.#cycle) {
      this.#again = true;
      return;
    }
    clearTimeout(this.#nextCycle);
    this.#cycle = this.#runCycle().finally(() => {
      this.#cycle = undefined;
      if (this.#again && this.#parts.running()) {
        this.#again = false;
        this.kick();
      }
    });
  }

  /**
   * Publish what is due (the polling claim: sql/cdc.ts), then find out where the candidates left
   * stand, so their WAL positions can be confirmed.
   *
   * When to claim again without a commit is decided where each due time becomes known, never by
   * a later look that can come too late: a retry's backoff when its settle returns
   * (`onRetried`), a deferred candidate's wait in the same statement that found it deferred
   * (#classify). Earlier, both were read after the cycle with `nextDueSql` ("the next due time
   * AFTER now"): a retry whose backoff ran out before that read — a slow cycle, a statement
   * queued behind others on a loaded machine — was found by nothing but the sweeper, and its
   * aggregate waited behind it (30 s by default) instead of its backoff (cdc.test.ts slows that
   * read past the backoff: nothing was published after 30 s).
   *
   * A due wake-up still runs `nextDueSql` once, BEFORE its claim (#lookAhead): it finds the next
   * due time (delayed deliveries, other dispatchers' backoffs), and a wake-up that came before
   * the database's clock reached the due time (a timer rounds to whole milliseconds) finds the
   * same row and is set again. Before the claim, not after: every row is then either due at the
   * claim (which takes it) or still ahead of the look (which wakes for it). Run after the claim,
   * the look missed a row that fell due between the two statements — neither claimed nor ahead —
   * and left it to the sweeper: 300 ms between them on a loaded machine were enough (cdc.test.ts
   * "a wake-up that comes before the server considers the retry due", 1 failure under load).
   */
  async #runCycle(): Promise<void> {
    let nextInMs: number | undefined;
    const dueWake = this.#dueWake;
    this.#dueWake = false;
    try {
      // Without candidates only a due time is worth a claim: the sweeper has the rest.
      if (this.#parts.store.candidates.size === 0 && !dueWake) return;
      // After a due wake-up, the next due time is read BEFORE the claim (see above).
      if (dueWake) await this.#lookAhead();
      await this.#parts.worker.drain();
      // Everything settled (onResolved resolved it): nothing left to classify. New commits
      // arrived meanwhile: publish them first (the next cycle starts right away) and classify —
      // which only serves confirmation — at most every CLASSIFY_EVERY_MS.
      const classify =
        this.#parts.store.candidates.size > 0 &&
        !(this.#again && Date.now() - this.#classifiedAt < CLASSIFY_EVERY_MS);
      if (classify) {
        this.#classifiedAt = Date.now();
        nextInMs = await this.#classify();
      }
      if (!classify && this.#parts.store.candidates.size > 0) return; // the next cycle runs at once
    } catch (error) {
      this.#parts.events.emit('cdc:cycle:failure', { error: toError(error) });
      nextInMs = this.#parts.options.recheckMs ?? 250;
      this.#parts.onDatabaseError(error);
    }
    await this.#parts.afterCycle();
    if (nextInMs !== undefined && this.#parts.running()) {
      clearTimeout(this.#nextCycle);
      this.#nextCycle = setTimeout(() => this.kick(), nextInMs);
      this.#nextCycle.unref();
    }
  }

  /**
   * Wakes at the next due time ahead of now (sql/cdc.ts nextDueSql), if any. A failed look does
   * not stop the claim after it, and is itself due again after `recheckMs`: otherwise the
   * re-check cycle, which has no due wake-up of its own, would not look again.
   */
  async #lookAhead(): Promise<void> {
    try {
      const { rows } = await this.#parts.options.executor.query<{ dueInMs: string }>(
        this.#nextDueSql,
        [],
        this.#queryOptions,
      );
      if (rows[0]) this.wakeAtDue(Number(rows[0].dueInMs));
    } catch (error) {
      this.#parts.events.emit('cdc:cycle:failure', { error: toError(error) });
      this.#parts.onDatabaseError(error);
      this.wakeAtDue(this.#parts.options.recheckMs ?? 250);
    }
  }

  /**
   * Claims again in `dueInMs` (a message falls due then: backoff, delayed delivery), unless an
   * earlier wake-up is set already. Further than `maxHoldMs` is the sweeper's. A timer of its
   * own: the re-check timer is reset by every cycle, and a due time must not be lost with it.
   */
  wakeAtDue(dueInMs: number): void {
    if (!this.#parts.running() || dueInMs > (this.#parts.options.maxHoldMs ?? 60_000)) return;
    const at = Date.now() + Math.max(dueInMs, 1);
    if (at >= this.#dueAt) return;
    clearTimeout(this.#dueTimer);
    this.#dueAt = at;
    this.#dueTimer = setTimeout(() => {
      this.#dueTimer = undefined;
      this.#dueAt = Infinity;
      this.#dueWake = true;
      this.kick();
    }, at - Date.now());
    this.#dueTimer.unref();
  }

  /**
   * Reads where the oldest candidates stand and resolves their positions; returns when to look
   * again. Bounded (issue 16): one query reads CLASSIFY_SLICE candidates, the oldest — the
   * confirmed position cannot pass the first unresolved one, so reading those behind it would
   * move nothing. The next slice is read only when this one is resolved entirely, so the work
   * follows the rows that move, not the candidates that wait: 20,000 candidates blocked behind
   * one aggregate's head cost a slice per look, and 20,000 published by another dispatcher cost
   * 40 slices once.
   */
  async #classify(): Promise<number | undefined> {
    let recheckInMs: number | undefined;
    for (;;) {
      const slice: string[] = [];
      for (const id of this.#parts.store.candidates) {
        if (slice.length === CLASSIFY_SLICE) break;
        slice.push(id);
      }
      if (slice.length === 0) return recheckInMs;
      const { rows } = await this.#parts.options.executor.query<CandidateState>(
        this.#statesSql,
        [slice],
        this.#queryOptions,
      );
      const found = classifyCandidates(
        rows,
        {
          candidates: this.#parts.store.candidates,
          missingSince: this.#missingSince,
          resolve: (id) => this.#parts.resolve(id),
        },
        {
          now: Date.now(),
          recheckMs: this.#parts.options.recheckMs ?? 250,
          maxHoldMs: this.#parts.options.maxHoldMs ?? 60_000,
        },
      );
      // Deferred (not due, or behind a head that is not due): claim again when it is.
      if (found.dueInMs !== undefined) this.wakeAtDue(found.dueInMs);
      if (found.recheckInMs !== undefined)
        recheckInMs = Math.min(recheckInMs ?? Infinity, found.recheckInMs);
      if (slice.some((id) => this.#parts.store.candidates.has(id))) return recheckInMs;
    }
  }
}
