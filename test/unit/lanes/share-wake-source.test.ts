import { describe, expect, it } from 'vitest';
import type { WakeSource } from '../../../src/dispatcher/wake-source.js';
import { shareWakeSource } from '../../../src/lanes/lane-dispatcher-group.js';

/**
 * The fan-out of one wake source to the members of a lane dispatcher group
 * (`createLaneDispatcher({ concurrency })`): started and stopped once, armed while any member
 * waits, disarmed when none does, in call order (wake-source.ts's protocol).
 */
function recordingSource() {
  const calls: string[] = [];
  let wake: ((hint?: string) => void) | undefined;
  let finishIdle: (() => void) | undefined;
  const source: WakeSource = {
    start: async (w) => {
      calls.push('start');
      wake = w;
    },
    idle: () => {
      calls.push('idle');
      return new Promise<void>((resolve) => (finishIdle = resolve));
    },
    busy: async () => {
      calls.push('busy');
    },
    stop: async () => {
      calls.push('stop');
    },
  };
  return { source, calls, wake: (hint?: string) => wake?.(hint), finishIdle: () => finishIdle?.() };
}

describe('shareWakeSource', () => {
  it('starts the source once and gives every member each wake-up, with its hint', async () => {
    const { source, calls, wake } = recordingSource();
    const members = shareWakeSource(source, 3);
    const got: (string | undefined)[][] = [[], [], []];
    await Promise.all(members.map((m, i) => m.start((hint) => got[i]!.push(hint))));
    expect(calls).toEqual(['start']);
    wake('3:17');
    wake();
    expect(got).toEqual([
      ['3:17', undefined],
      ['3:17', undefined],
      ['3:17', undefined],
    ]);
  });

  it('arms once while any member waits; a member arming second resolves only once it is armed', async () => {
    const { source, calls, finishIdle } = recordingSource();
    const [a, b] = shareWakeSource(source, 2);
    let aArmed = false;
    let bArmed = false;
    const armingA = a!.idle!().then(() => (aArmed = true));
    const armingB = b!.idle!().then(() => (bArmed = true));
    await new Promise((resolve) => setImmediate(resolve));
    expect(calls).toEqual(['idle']);
    expect([aArmed, bArmed]).toEqual([false, false]);
    finishIdle();
    await Promise.all([armingA, armingB]);
    expect([aArmed, bArmed]).toEqual([true, true]);
    // Disarmed when the last waiting member goes busy, not before.
    await a!.busy!();
    expect(calls).toEqual(['idle']);
    await b!.busy!();
    expect(calls).toEqual(['idle', 'busy']);
    // A member busy without having waited disarms nothing.
    await a!.busy!();
    expect(calls).toEqual(['idle', 'busy']);
  });

  it('stops the source once, when the last member stops', async () => {
    const { source, calls } = recordingSource();
    const members = shareWakeSource(source, 2);
    await members[0]!.stop();
    expect(calls).toEqual([]);
    await members[1]!.stop();
    expect(calls).toEqual(['stop']);
  });
});
