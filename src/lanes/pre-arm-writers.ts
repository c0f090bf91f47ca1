/** What one probe of the database's sessions found (sql/lanes.ts `lanePreArmWritersSql`). */
export interface PreArmProbe {
  /** The server's clock when the probe ran. */
  now: string;
  /** A transaction begun at or before the arming's time that may still write is left. */
  pending: boolean;
}

/** What a lane read carries from its start to its end ({@link PreArmWriters.readBegins}). */
export interface PreArmRead {
  readonly known: Known;
  readonly tick: number;
}

interface Known {
  generation: number;
  /** The server's clock read after the arming (by its first probe); null until then. */
  armedAt: string | null;
  /** The tick of the probe that found no writer of before the arming left; 0: none yet. */
  probedAt: number;
  clear: boolean;
}

const unknown = (generation: number): Known => ({
  generation,
  armedAt: null,
  probedAt: 0,
  clear: false,
});

/**
 * Whether every writer names what it writes now, for one arming of the wake source (its
 * `generation`, WakeUps). A lanes writer decides to NOTIFY in its INSERT, from the waiter rows
 * its snapshot sees (sql/lanes.ts), so a transaction whose snapshot is older than the arming
 * sends none: while one may be left the dispatcher keeps looking (lane-dispatcher.ts
 * `#idleWaitMs`); once none is, the wake-ups alone say what commits.
 *
 * States, per generation (a new one, or {@link forget}, starts at the first):
 * - **unknown**: not probed yet, or the last probe found a writer begun at or before the
 *   arming (its clock, `armedAt`, is the first probe's).
 * - **probed**: a probe found none left; a lane read begun after it has not returned yet, and
 *   what those writers committed may be behind the last read.
 * - **clear**: such a read returned. Every later writer notifies, until the next arming.
 *
 * Probes and lane reads are ordered by one counter (ticks), so a read begun before the probe
 * that is still running when it ends does not count.
 */
export class PreArmWriters {
  readonly #probe: (armedAt: string | null) => Promise<PreArmProbe | undefined>;
  #known = unknown(-1);
  #ticks = 0;

  /** `probe`: runs `lanePreArmWritersSql` with the arming's time (null: the probe's own). */
  constructor(probe: (armedAt: string | null) => Promise<PreArmProbe | undefined>) {
    this.#probe = probe;
  }

  /** True when `generation` is the one this knows about (probed at least once, or probing). */
  knows(generation: number): boolean {
    return this.#known.generation === generation;
  }

  /** True in the clear state of `generation`. */
  clear(generation: number): boolean {
    return this.#known.generation === generation && this.#known.clear;
  }

  /**
   * True in the clear state of `generation`; otherwise probes once when it is unknown (not while
   * a read after a probe is awaited) and returns false. False too when the probe fails: the
   * looks go on, the next call asks again.
   */
  async check(generation: number): Promise<boolean> {
    if (this.#known.generation !== generation) this.#known = unknown(generation);
    const known = this.#known;
    if (known.clear) return true;
    if (known.probedAt > 0) return false;
    try {
      const row = await this.#probe(known.armedAt);
      if (!row || known !== this.#known) return false;
      // The first probe after an arming runs after it committed: its clock bounds the arming.
      known.armedAt ??= row.now;
      if (!row.pending) known.probedAt = ++this.#ticks;
    } catch {
      // Unknown still.
    }
    return false;
  }

  /** A lane read (of every owned lane) begins; pass the result to {@link readEnded}. */
  readBegins(): PreArmRead {
    return { known: this.#known, tick: ++this.#ticks };
  }

  /** The read returned: begun after the probe that found no writer left, it makes it clear. */
  readEnded(read: PreArmRead): void {
    const { known, tick } = read;
    if (known === this.#known && known.probedAt > 0 && tick > known.probedAt) known.clear = true;
  }

  /** Back to unknown (a failed call: the next may reach another server). */
  forget(): void {
    this.#known = unknown(-1);
  }
}
