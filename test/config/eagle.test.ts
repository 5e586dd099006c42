/** A model's `eagle` (Eagle block hashing, Dynamo's `is_eagle`): off by default, a boolean, and restart-only. */
import { afterAll, describe, expect, it } from 'vitest';
import { reloadProblems } from '../../src/config/index.js';
import { kvgateErrorOf } from '../helpers/kvgate-error.js';
import { oneModelConfig } from '../helpers/one-model-config.js';

const config = oneModelConfig('eagle');
const load = config.load;
afterAll(() => config.remove());

describe('eagle', () => {
  it('is off by default and read per model', () => {
    expect(load([]).models[0]!.eagle).toBe(false);
    expect(load(['eagle: true']).models[0]!.eagle).toBe(true);
  });

  it('must be a boolean, and a reload cannot change it', () => {
    const problems = kvgateErrorOf(() => load(['eagle: sometimes'])).detail!.problems as { path: string }[];
    expect(problems.map((p) => p.path)).toEqual(['models[0].eagle']);
    expect(reloadProblems(load([]), load(['eagle: true'])).map((p) => p.path)).toEqual(['models[0].eagle']);
  });
});
