/**
 * Issue 13 item 3: a prompt certainly over the token limit is refused by a
 * one-pass lower bound on its token count, before it is tokenized.
 */
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tokenizer } from 'tokenizers';
import { afterAll, describe, expect, it } from 'vitest';
import { tokenFloorOf } from '../../src/frontend/preprocess/prompt-floor.js';
import { demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { mulberry32 } from '../helpers/rng.js';
import { chat, post, start } from './server-harness.js';

const files = demoTokenizerFiles();
const dir = mkdtempSync(join(tmpdir(), 'kvgate-floor-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ALPHABET = [
  'a',
  'e',
  'Z',
  ' ',
  '  ',
  '\n',
  '\t',
  '7',
  '42',
  '=',
  '-',
  '_',
  '.',
  ',',
  '<|im_start|>',
  'é',
  'e\u0301',
  'A\u030a',
  '日本',
  '😀',
  '\u1100\u1161',
];

describe('the token floor (issue 13 item 3)', () => {
  it('never exceeds the real token count of the Qwen3 tokenizer (seeded random texts, runs, combining marks)', async () => {
    const floor = tokenFloorOf(files.tokenizerJson)!;
    expect(floor).toBeDefined();
    const tok = Tokenizer.fromFile(files.tokenizerJson);
    const rng = mulberry32(13);
    const texts = [
      ' '.repeat(5000),
      '='.repeat(3000),
      '1234567890'.repeat(300),
      'word '.repeat(2000),
      'e\u0301'.repeat(1000),
    ];
    for (let i = 0; i < 300; i++) {
      const n = 1 + Math.floor(rng() * 400);
      let t = '';
      for (let k = 0; k < n; k++)
        t += ALPHABET[Math.floor(rng() * ALPHABET.length)]!.repeat(1 + Math.floor(rng() * (rng() < 0.1 ? 200 : 3)));
      texts.push(t);
    }
    for (const t of texts) {
      const real = (await tok.encode(t, null, { addSpecialTokens: false })).getIds().length;
      expect(floor(t), JSON.stringify(t.slice(0, 40))).toBeLessThanOrEqual(real);
    }
    // And it is not vacuous: digits count one each, words a fair share.
    expect(floor('1234567890'.repeat(100))).toBeGreaterThanOrEqual(999);
    expect(floor('the quick brown fox jumps over the lazy dog '.repeat(1000))).toBeGreaterThan(900);
  });

  it('a tokenizer it cannot bound soundly gets no floor (WordPiece: an unknown word is one token of any length)', () => {
    const path = join(dir, 'wordpiece.json');
    writeFileSync(
      path,
      JSON.stringify({
        model: { type: 'WordPiece', vocab: { '[UNK]': 0, a: 1 } },
        normalizer: null,
        pre_tokenizer: { type: 'Whitespace' },
      }),
    );
    expect(tokenFloorOf(path)).toBeUndefined();
    const lower = join(dir, 'lowercase.json');
    writeFileSync(
      lower,
      JSON.stringify({
        model: { type: 'BPE', vocab: { a: 0 } },
        normalizer: { type: 'Lowercase' },
        pre_tokenizer: { type: 'ByteLevel' },
      }),
    );
    expect(tokenFloorOf(lower)).toBeUndefined();
  });

  it('a 4 MB prompt is refused in well under a second, and a normal prompt is still served', async () => {
    const g = await start({
      limits: { max_body_bytes: 8 * 1024 * 1024, max_prompt_tokens: 2000, max_concurrent_requests: 4 },
    });
    const huge = 'the quick brown fox jumps over the lazy dog '.repeat(95_000);
    const t0 = performance.now();
    const r = await post(`${g.url}/v1/completions`, { model: 'demo', prompt: huge });
    const ms = performance.now() - t0;
    expect(r.status).toBe(400);
    expect(r.json.error.code).toBe('KVG_ERR_PROMPT_TOO_LONG');
    expect(r.json.error.message).toMatch(/the prompt has at least \d+ tokens/);
    expect(ms).toBeLessThan(1000);
    expect((await post(`${g.url}/v1/chat/completions`, chat('a normal prompt'))).status).toBe(200);
  });
});
