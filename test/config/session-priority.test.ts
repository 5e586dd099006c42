/** A model's `session_priority` (the session start sent as the engines' `priority`): off by default, one of three, restart-only. */
import { afterAll, describe, expect, it } from 'vitest';
import { reloadProblems } from '../../src/config/index.js';
import { kvgateErrorOf } from '../helpers/kvgate-error.js';
import { oneModelConfig } from '../helpers/one-model-config.js';

const config = oneModelConfig('session-priority');
const load = config.load;
afterAll(() => config.remove());

describe('session_priority', () => {
  it('is off by default and read per model', () => {
    expect(load([]).models[0]!.sessionPriority).toBeUndefined();
    expect(load(['session_priority: off']).models[0]!.sessionPriority).toBeUndefined();
    expect(load(['session_priority: lower_first']).models[0]!.sessionPriority).toBe('lower_first');
    expect(load(['session_priority: higher_first']).models[0]!.sessionPriority).toBe('higher_first');
  });

  it('names its allowed values when wrong, and a reload cannot change it', () => {
    const problems = kvgateErrorOf(() => load(['session_priority: oldest'])).detail!.problems as {
      path: string;
      reason: string;
    }[];
    expect(problems.map((p) => p.path)).toEqual(['models[0].session_priority']);
    expect(problems[0]!.reason).toMatch(/lower_first/);
    expect(reloadProblems(load([]), load(['session_priority: lower_first'])).map((p) => p.path)).toEqual([
      'models[0].session_priority',
    ]);
  });
});
