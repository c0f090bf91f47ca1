import { describe, expect, it } from 'vitest';
import { PreArmWriters, type PreArmProbe } from '../../../src/lanes/pre-arm-writers.js';

/** A PreArmWriters whose probe answers from `answers` in turn, recording what it was asked. */
function writers(...answers: (PreArmProbe | Error)[]) {
  const asked: (string | null)[] = [];
  const known = new PreArmWriters(async (armedAt) => {
    asked.push(armedAt);
    const answer = answers.shift();
    if (answer instanceof Error) throw answer;
    return answer;
  });
  return { known, asked };
}

const at = (now: string, pending: boolean): PreArmProbe => ({ now, pending });

describe('PreArmWriters', () => {
  it('is clear only after a read begun after the probe that found no writer of before left', async () => {
    const { known } = writers(at('t1', false));
    const before = known.readBegins(); // a read already running when the probe answers
    expect(await known.check(1)).toBe(false); // probed
    known.readEnded(before);
    expect(known.clear(1)).toBe(false);
    expect(await known.check(1)).toBe(false); // waits for the read, no second probe
    const after = known.readBegins();
    known.readEnded(after);
    expect(known.clear(1)).toBe(true);
    expect(await known.check(1)).toBe(true);
  });

  it("keeps the first probe's clock as the arming's time, and probes again while a writer of before is left", async () => {
    const { known, asked } = writers(at('t1', true), at('t2', true), at('t3', false));
    expect(await known.check(4)).toBe(false);
    expect(await known.check(4)).toBe(false);
    expect(await known.check(4)).toBe(false);
    expect(asked).toEqual([null, 't1', 't1']);
    known.readEnded(known.readBegins());
    expect(known.clear(4)).toBe(true);
  });

  it('starts over at a new arming, and after forget()', async () => {
    const { known, asked } = writers(at('t1', false), at('t2', false), at('t3', false));
    await known.check(1);
    known.readEnded(known.readBegins());
    expect(known.clear(1)).toBe(true);
    expect(known.knows(2)).toBe(false);
    expect(known.clear(2)).toBe(false);
    expect(await known.check(2)).toBe(false); // a probe of its own
    expect(asked).toEqual([null, null]);
    const read = known.readBegins();
    known.forget();
    known.readEnded(read); // a read of the forgotten state clears nothing
    expect(known.clear(2)).toBe(false);
    expect(await known.check(2)).toBe(false);
    expect(asked).toEqual([null, null, null]);
  });

  it('a failed or empty probe leaves it unknown: the next check asks again', async () => {
    const { known, asked } = writers(
      new Error('connection lost'),
      undefined as never,
      at('t', false),
    );
    expect(await known.check(1)).toBe(false);
    expect(await known.check(1)).toBe(false);
    expect(await known.check(1)).toBe(false);
    expect(asked).toHaveLength(3);
    known.readEnded(known.readBegins());
    expect(await known.check(1)).toBe(true);
  });

  it('an answer that arrives after the arming moved on is not kept', async () => {
    const pending: ((p: PreArmProbe) => void)[] = [];
    const known = new PreArmWriters(() => new Promise((resolve) => pending.push(resolve)));
    const first = known.check(1);
    const second = known.check(2); // the next arming, while the first probe runs
    pending[0]!(at('t1', false)); // the first arming's answer: for a state that is gone
    expect(await first).toBe(false);
    pending[1]!(at('t2', true));
    expect(await second).toBe(false);
    known.readEnded(known.readBegins());
    expect(known.clear(1)).toBe(false);
    expect(known.clear(2)).toBe(false);
  });
});
