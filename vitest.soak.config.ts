import { defineConfig } from 'vitest/config';

// `npm run soak`: the long memory soak, kept out of `npm test` (its files end in .soak.ts).
export default defineConfig({
  test: {
    include: ['test/soak/**/*.soak.ts'],
    testTimeout: 900_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});
