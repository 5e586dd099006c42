/**
 * A model's `anthropic_inline_system` (where a Messages request's system messages inside `messages` go, as the
 * engine's own setting of that name places them): `auto` by default (settled at start by probing the chat
 * template), `preserve` or `fold` when set, restart-only.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { reloadProblems } from '../../src/config/index.js';
import { kvgateErrorOf } from '../helpers/kvgate-error.js';
import { oneModelConfig } from '../helpers/one-model-config.js';

const config = oneModelConfig('anthropic-inline-system');
const load = config.load;
afterAll(() => config.remove());

describe('anthropic_inline_system', () => {
  it('is auto by default and read per model', () => {
    expect(load([]).models[0]!.anthropicInlineSystem).toBe('auto');
    expect(load(['anthropic_inline_system: fold']).models[0]!.anthropicInlineSystem).toBe('fold');
    expect(load(['anthropic_inline_system: preserve']).models[0]!.anthropicInlineSystem).toBe('preserve');
  });

  it('names its allowed values when wrong, and a reload cannot change it', () => {
    const problems = kvgateErrorOf(() => load(['anthropic_inline_system: always'])).detail!.problems as {
      path: string;
      reason: string;
    }[];
    expect(problems.map((p) => p.path)).toEqual(['models[0].anthropic_inline_system']);
    expect(problems[0]!.reason).toMatch(/auto.*preserve.*fold/);
    expect(reloadProblems(load([]), load(['anthropic_inline_system: fold'])).map((p) => p.path)).toEqual([
      'models[0].anthropic_inline_system',
    ]);
  });
});
