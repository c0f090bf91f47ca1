import type { ClaimShapeOption } from './options.js';

/**
 * Which claim a dispatcher asks for (issue 25): heads first (as many aggregates as the batch
 * holds, one message each unless the heads leave room) or runs first (a few aggregates' heads
 * with the runs behind them; sql/runs-first-claim.ts).
 *
 * A run is published one round per message unless the publisher sends a lane whole in one call
 * (ordered-publish.ts), so runs first costs a batch about one publish call per message of its
 * longest run, and saves a non-HOT update per message in the settle (the successor's `ready`
 * flip). Worth it when a call costs less than that update: the publisher declares
 * `ordersWithinCall`, or its calls have been returning in under {@link FAST_CALL_MS} (a moving
 * average over the last calls, so a destination that slows down turns it off within a few
 * batches). Until a call has been timed the dispatcher claims heads first: nothing is assumed of
 * a publisher it has not seen. Nor when there are no runs to take (see {@link ClaimShape.noteClaim}).
 */

/** A publish call that returns faster than this (ms, moving average) makes runs worth it. */
export const FAST_CALL_MS = 0.5;

/**
 * Runs first takes at most one head per this many messages of the batch (10 of 200). Twenty
 * rather than ten so that a backlog on few aggregates still fills two claims at once: with 20
 * aggregates 10,000 deep, ten heads per claim left all twenty leased by one claim, and the claim
 * that overlaps its settle found nothing (deep_backlog_ratio 0.68 with ten, 1.03 with twenty;
 * ordered drains on 500 aggregates about the same either way, 2026-12-03).
 */
export const RUN_LENGTH = 20;

/** Weight of the newest call in the moving average. */
const SMOOTHING = 0.2;

/**
 * After a runs-first claim that found no run (every aggregate one message deep), this many claims
 * go heads first before runs first is tried again.
 */
export const PROBE_EVERY = 8;

export class ClaimShape {
  readonly #batchSize: number;
  readonly #ordersWithinCall: boolean;
  readonly #option: ClaimShapeOption;
  #callMs: number | undefined;
  /** What the last claim asked for. */
  #askedMaxHeads: number | undefined;
  /** Most of the last claim was unordered: those have no runs, and runs first only costs them. */
  #mostlyUnordered = false;
  /** Claims left to go heads first after a runs-first claim found no run. */
  #headsFirstFor = 0;

  constructor(batchSize: number, ordersWithinCall: boolean, option: ClaimShapeOption = 'auto') {
    this.#batchSize = batchSize;
    this.#ordersWithinCall = ordersWithinCall;
    this.#option = option;
  }

  /** Records how long one publish call took, in ms. */
  noteCall(durationMs: number): void {
    if (!Number.isFinite(durationMs) || durationMs < 0) return;
    this.#callMs =
      this.#callMs === undefined
        ? durationMs
        : this.#callMs + SMOOTHING * (durationMs - this.#callMs);
  }

  /**
   * Records what a claim returned. A runs-first claim pays a second walk of the ready index for
   * nothing when there is no run to take: a batch of unordered messages (measured: 0.86 of the
   * heads-first rate), or of aggregates one message deep.
   */
  noteClaim(messages: readonly { aggregateId: string; ordered?: boolean }[]): void {
    if (messages.length === 0) return;
    const aggregates = new Set<string>();
    let ordered = 0;
    let runs = false;
    for (const m of messages) {
      if (m.ordered === false) continue;
      ordered++;
      if (aggregates.has(m.aggregateId)) runs = true;
      else aggregates.add(m.aggregateId);
    }
    this.#mostlyUnordered = ordered * 2 < messages.length;
    if (this.#askedMaxHeads !== undefined) {
      if (!runs) this.#headsFirstFor = PROBE_EVERY;
    } else if (this.#headsFirstFor > 0) this.#headsFirstFor--;
  }

  /** The next claim's `maxHeads`: a number for runs first, undefined for heads first. */
  maxHeads(): number | undefined {
    const cap = Math.ceil(this.#batchSize / RUN_LENGTH);
    if (this.#option !== 'auto') {
      this.#askedMaxHeads = this.#option === 'runs-first' ? cap : undefined;
      return this.#askedMaxHeads;
    }
    const fast =
      this.#ordersWithinCall || (this.#callMs !== undefined && this.#callMs < FAST_CALL_MS);
    this.#askedMaxHeads =
      !fast || this.#mostlyUnordered || this.#headsFirstFor > 0 || this.#batchSize < 2 * RUN_LENGTH
        ? undefined
        : cap;
    return this.#askedMaxHeads;
  }
}
