/**
 * Runs `work` on demand and every `intervalMs` once started, one run at a time (a call during a
 * run waits for that run): the timer both dashboard samplers drive their samples with.
 */
export class Periodic {
  readonly #work: () => Promise<void>;
  readonly #intervalMs: number;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;

  constructor(work: () => Promise<void>, intervalMs: number) {
    this.#work = work;
    this.#intervalMs = intervalMs;
  }

  /** Runs now, or waits for the run under way. */
  run(): Promise<void> {
    this.#running ??= this.#work().finally(() => (this.#running = undefined));
    return this.#running;
  }

  /** Runs now and every `intervalMs` (the timer does not keep the process alive). */
  start(): void {
    if (this.#timer) return;
    void this.run();
    this.#timer = setInterval(() => void this.run(), this.#intervalMs);
    this.#timer.unref();
  }

  /** Stops the timer and waits for the run under way. */
  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }
}
