import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    // Vitest's default is one fork per core but one, which on a 2-core CI machine runs the files one at a
    // time (923 s for the suite). Most integration files spend their time waiting on the gateway and mocker
    // processes they start, so a second fork there finishes the suite in 529 s with every test passing.
    maxWorkers: Math.max(2, availableParallelism() - 1),
  },
});
