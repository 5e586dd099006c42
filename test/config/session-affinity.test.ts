/** A model's `session_affinity`: `cost` by default in KV mode, `pin` in the others; `cost` needs KV mode; restart-only. */
import { afterAll, describe, expect, it } from 'vitest';
import { reloadProblems } from '../../src/config/index.js';
import { kvgateErrorOf } from '../helpers/kvgate-error.js';
import { oneModelConfig } from '../helpers/one-model-config.js';

const config = oneModelConfig('session-affinity');
const load = config.load;
afterAll(() => config.remove());

describe('session_affinity', () => {
  it('defaults to cost in KV mode and to pin in the modes without a cost model', () => {
    expect(load([]).models[0]!.sessionAffinity).toBe('cost');
    expect(load(['session_affinity: pin']).models[0]!.sessionAffinity).toBe('pin');
    expect(load(['router_mode: round-robin']).models[0]!.sessionAffinity).toBe('pin');
    expect(load(['router_mode: least-loaded']).models[0]!.sessionAffinity).toBe('pin');
  });

  it('refuses cost without KV mode and unknown values, naming the field; a reload cannot change it', () => {
    for (const lines of [['router_mode: round-robin', 'session_affinity: cost'], ['session_affinity: sticky']]) {
      const problems = kvgateErrorOf(() => load(lines)).detail!.problems as { path: string }[];
      expect(problems.map((p) => p.path)).toEqual(['models[0].session_affinity']);
    }
    expect(reloadProblems(load([]), load(['session_affinity: pin'])).map((p) => p.path)).toEqual([
      'models[0].session_affinity',
    ]);
  });
});
