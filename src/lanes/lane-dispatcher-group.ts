import type { Dispatcher, DispatcherState, DrainResult } from '../dispatcher/dispatcher.js';
import { emptyStats, type DispatcherStats } from '../dispatcher/dispatcher-stats.js';
import type { WakeSource } from '../dispatcher/wake-source.js';

/**
 * `concurrency` lane dispatchers in one process, driven as one (`createLaneDispatcher({
 * concurrency })`). Each member is a whole lane dispatcher with its own owner id (`<id>/<n>`)
 * and at most its part of `maxLanes`, so the members hold disjoint lanes and each has one batch
 * in flight: while one waits for the database, another publishes.
 *
 * Why members and not more batches in one dispatcher: a lane's next read starts where the last
 * batch ended, so one dispatcher cannot read its lanes again before it has parsed what came back.
 * Measured on drains of 100,000 (process.cpuUsage and /proc of the backends): one dispatcher's
 * process spent ~5.3-6.2 µs a message of CPU and the database ~2.7, and the drain took about
 * their sum, one waiting on the other; two members on disjoint lanes overlap the two (131-148k
 * -> 160-191k msg/s on a quiet 2-core machine). Exactly what separate processes sharing the
 * lanes do (issue 43), without the processes.
 *
 * Events come from each member (`owner` says which); `stats()` and `drain()` add the members'
 * figures up; `onIdle()` resolves when every member is idle.
 */
export class LaneDispatcherGroup implements Dispatcher {
  readonly id: string;
  readonly #members: readonly Dispatcher[];

  constructor(id: string, members: readonly Dispatcher[]) {
    this.id = id;
    this.#members = members;
  }

  get state(): DispatcherState {
    return this.#members[0]!.state;
  }

  on: Dispatcher['on'] = (event, listener) => {
    const offs = this.#members.map((m) => m.on(event, listener));
    return () => offs.forEach((off) => off());
  };

  start(): void {
    for (const m of this.#members) m.start();
  }

  async stop(): Promise<void> {
    await Promise.all(this.#members.map((m) => m.stop()));
  }

  wake(): void {
    for (const m of this.#members) m.wake();
  }

  async onIdle(): Promise<void> {
    await Promise.all(this.#members.map((m) => m.onIdle()));
  }

  async drain(): Promise<DrainResult> {
    const results = await Promise.all(this.#members.map((m) => m.drain()));
    const { failed, ...sum } = results.reduce(
      (a, r) => ({ ...addStats(a, r), failed: a.failed || r.failed }),
      { ...emptyStats(), failed: false },
    );
    return { ...sum, failed };
  }

  stats(): DispatcherStats {
    return this.#members.map((m) => m.stats()).reduce(addStats, emptyStats());
  }
}

function addStats(a: DispatcherStats, b: DispatcherStats): DispatcherStats {
  const out = { ...a };
  for (const key of Object.keys(out) as (keyof DispatcherStats)[]) out[key] += b[key];
  return out;
}

/**
 * One {@link WakeSource} shared by the members of a group: started once, its wake-ups go to
 * every member; armed (`idle()`) while any member waits, disarmed (`busy()`) when none does, in
 * call order as the protocol asks (wake-source.ts); stopped when the last member stops. A member
 * that arms while another already did waits for that arming to finish, so its claim-once-more
 * still comes after the source is armed.
 */
export function shareWakeSource(source: WakeSource, members: number): WakeSource[] {
  const wakes: ((hint?: string) => void)[] = [];
  const waiting = new Set<number>();
  let started: Promise<void> | undefined;
  let chain: Promise<void> = Promise.resolve();
  let stopped = 0;
  // In call order, never rejecting the chain: a failed call is the caller's to report.
  const inOrder = (call: () => Promise<void>): Promise<void> => {
    const run = chain.then(call);
    chain = run.catch(() => undefined);
    return run;
  };
  return Array.from({ length: members }, (_, n): WakeSource => {
    const member: WakeSource = {
      start: (wake) => {
        wakes.push(wake);
        started ??= source.start((hint) => wakes.forEach((w) => w(hint)));
        return started;
      },
      stop: () => (++stopped === members ? source.stop() : Promise.resolve()),
    };
    const idle = source.idle?.bind(source);
    const busy = source.busy?.bind(source);
    if (idle)
      member.idle = () => {
        const first = waiting.size === 0;
        waiting.add(n);
        return first ? inOrder(idle) : chain;
      };
    if (busy)
      member.busy = () => {
        if (!waiting.delete(n) || waiting.size > 0) return Promise.resolve();
        return inOrder(busy);
      };
    return member;
  });
}
