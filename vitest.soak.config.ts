import { defineConfig } from 'vitest/config';

// `npm run soak`: the long soaks (memory, streams), kept out of `npm test` (their files end in .soak.ts).
// One file at a time: each measures a gateway under its own load.
export default defineConfig({
  test: {
    include: ['test/soak/**/*.soak.ts'],
    testTimeout: 900_000,
    hookTimeout: 60_000,
    pool: 'forks',
    fileParallelism: false,
  },
});
