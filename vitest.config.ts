import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    // Real Postgres, child processes and kill -9: generous, never used as a performance bound.
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Two cores here: more workers only add contention to the integration tests.
    maxWorkers: 2,
  },
});
