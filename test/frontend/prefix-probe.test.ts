/**
 * Issue 13 item 3: a prompt far over the token limit is refused after
 * tokenizing about as much text as the limit allows, not the whole prompt.
 */
import { describe, expect, it } from 'vitest';
import { ModelPreprocessor } from '../../src/frontend/preprocess/model-preprocessor.js';
import { prefixOverLimit } from '../../src/frontend/preprocess/prefix-probe.js';
import type { PreprocessModelSpec } from '../../src/frontend/preprocess/protocol.js';
import { isKvgateError } from '../../src/errors/index.js';
import { demoTokenizerFiles, loadTokenizer, type TextTokenizer } from '../../src/tokenizer/index.js';
import { mulberry32 } from '../helpers/rng.js';

const WORDS = [
  'the',
  'router',
  'sends',
  'each',
  'request',
  'to',
  'worker',
  'that',
  'already',
  'holds',
  'longest',
  'prefix',
  'of',
  'prompt',
  'cache',
  'weighed',
  'against',
  'its',
  'load',
  'engines',
  'publish',
  'blocks',
  'events',
  'and',
  'tokens',
  'flow',
  'back',
  'quickly',
];

/** English-like text of about `chars` characters (seeded). */
function prose(chars: number, seed = 7): string {
  const rng = mulberry32(seed);
  const parts: string[] = [];
  let n = 0;
  while (n < chars) {
    const w = WORDS[Math.floor(rng() * WORDS.length)]!;
    const piece = rng() < 0.08 ? `${w}.\n` : `${w} `;
    parts.push(piece);
    n += piece.length;
  }
  return parts.join('');
}

/** The demo (Qwen3) tokenizer, counting the characters it is asked to encode. */
function counting(): { tok: TextTokenizer; chars: () => number } {
  const real = loadTokenizer(demoTokenizerFiles());
  let chars = 0;
  const tok = {
    kind: real.kind,
    source: real.source,
    vocabSize: real.vocabSize,
    encode: (text: string, opts?: { addSpecialTokens?: boolean }) => ((chars += text.length), real.encode(text, opts)),
  } as unknown as TextTokenizer;
  return { tok, chars: () => chars };
}

describe('the prefix probe (issue 13 item 3)', () => {
  it('refuses a prompt of 60x the limit after tokenizing a few times the limit, with a count over the limit', async () => {
    const limit = 4096;
    const text = prose(limit * 4 * 60);
    const { tok, chars } = counting();
    const over = await prefixOverLimit(tok, text, limit, false);
    const probed = chars();
    expect(over).toBeGreaterThan(limit);
    expect(probed).toBeLessThan(text.length / 10);
    // The count is the whole text's own: its tokens up to the last probe's end are at least as many.
    expect(over).toBeLessThanOrEqual((await tok.encode(text, { addSpecialTokens: false })).length);
  });

  it('leaves prompts within the limit alone: short ones are not probed, long whitespace-heavy ones are never refused', async () => {
    const limit = 4096;
    const { tok, chars } = counting();
    expect(await prefixOverLimit(tok, prose(limit * 5), limit, false)).toBeUndefined();
    expect(chars()).toBe(0); // under 8 characters per token of the limit: no probe at all
    // 120 spaces a word: far more characters than the limit, few tokens.
    const sparse = Array.from({ length: 1000 }, (_, i) => `${WORDS[i % WORDS.length]}${' '.repeat(120)}`).join('');
    expect(sparse.length).toBeGreaterThan(limit * 8);
    const exact = (await tok.encode(sparse, { addSpecialTokens: false })).length;
    expect(exact).toBeLessThanOrEqual(limit);
    expect(await prefixOverLimit(tok, sparse, limit, false)).toBeUndefined();
  });

  it('through the preprocessor: KVG_ERR_PROMPT_TOO_LONG in well under the time of tokenizing the prompt whole', async () => {
    const spec: PreprocessModelSpec = {
      name: 'demo',
      blockSize: 16,
      tokenizer: { kind: 'demo' },
      segmentCacheTokens: 0,
      segmentCacheBytes: 0,
    };
    const pre = await ModelPreprocessor.create(spec);
    const text = prose(2_000_000, 11);
    const tok = loadTokenizer(demoTokenizerFiles());
    // The fastest of three runs of each, alternating: the test files run in parallel on a small machine, and
    // one run of either can be slowed by the others (one CI run read 0.51 of the whole, typical runs 0.25 to 0.3).
    let whole = Infinity;
    let refused = Infinity;
    for (let i = 0; i < 3; i++) {
      const t0 = performance.now();
      await tok.encode(text, { addSpecialTokens: true });
      whole = Math.min(whole, performance.now() - t0);
      const t1 = performance.now();
      const err = await pre
        .run({ kind: 'text', model: 'demo', prompt: text, maxPromptTokens: 16_384 })
        .catch((e: unknown) => e);
      refused = Math.min(refused, performance.now() - t1);
      expect(isKvgateError(err, 'KVG_ERR_PROMPT_TOO_LONG')).toBe(true);
    }
    expect(refused).toBeLessThan(whole / 2);
  });
});
