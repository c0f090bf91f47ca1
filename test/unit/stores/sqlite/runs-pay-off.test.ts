import { describe, expect, it } from 'vitest';
import { runsPayOff } from '../../../../src/stores/sqlite/runs-pay-off.js';

describe('runsPayOff', () => {
  it('takes runs while they took something or would have a share, heads only otherwise', () => {
    expect(runsPayOff(200, 150, 0, 0)).toBe(false); // nothing ordered
    expect(runsPayOff(200, 0, 0, 0)).toBe(true); // nothing at all: runs for the next burst
    expect(runsPayOff(200, 200, 150, 3)).toBe(true); // runs took 3
    expect(runsPayOff(200, 200, 200, 0)).toBe(false); // 200 heads fill the batch
    expect(runsPayOff(200, 120, 100, 0)).toBe(false); // 80 left for 100 heads: share 0
    expect(runsPayOff(200, 100, 100, 0)).toBe(true); // 100 left for 100 heads: share 1
    expect(runsPayOff(10, 2, 2, 0)).toBe(true);
  });
});
