/** Seeded PRNG for tests: the same mulberry32 generator core logic uses (`seededRng`). */
import { seededRng } from '../../src/common/index.js';

export const mulberry32: (seed: number) => () => number = seededRng;
