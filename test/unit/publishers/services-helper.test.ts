import { afterEach, describe, expect, it, vi } from 'vitest';
import { closedPort, requireService } from '../../helpers/services.js';

describe('requireService', () => {
  const ci = process.env.CI;
  afterEach(() => {
    if (ci === undefined) delete process.env.CI;
    else process.env.CI = ci;
    vi.restoreAllMocks();
  });

  it('skips with a printed reason locally, and fails under CI=true', async () => {
    const port = await closedPort();
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);

    delete process.env.CI;
    expect(await requireService('Thing', '127.0.0.1', port)).toBe(false);
    expect(warn).toHaveBeenCalledWith(expect.stringContaining(`SKIPPING Thing tests`));

    process.env.CI = 'true';
    await expect(requireService('Thing', '127.0.0.1', port)).rejects.toThrow(/CI=true requires it/);
  });
});
