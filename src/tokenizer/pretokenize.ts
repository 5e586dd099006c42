/**
 * Hand-written scanners for the pre-tokenizer split patterns of the models kvgate is tested with (the
 * cl100k-style pattern of Qwen2/3 and Llama 3, and gpt-oss's o200k pattern), used by `ByteLevelBpe` in
 * place of V8's regex engine, which spends most of a prompt's tokenizing time on the `\p{L}`/`\p{N}`
 * classes. A scanner is chosen only when the translated pattern's source is exactly the translation of
 * one of the Oniguruma patterns below, so it implements that regex and nothing else; every other pattern
 * keeps the regex. Each scanner follows its pattern's alternatives in order with the regex's leftmost-first
 * (greedy, backtracking) semantics, and the classes of each code point come from testing the same class
 * expressions, translated by `bpe-regex.ts`, once per code point.
 */
import { translateSplitRegex } from './bpe-regex.js';

/**
 * Where the pattern's match at `pos` ends. The patterns scanned here match at every position and never
 * match the empty string, so for `pos < text.length` the result is above `pos`: an `Isolated` split by
 * them has no gaps, its pieces are the consecutive matches.
 */
export type PieceScanner = (text: string, pos: number) => number;

// Class bits of a code point, each the set a class expression of the patterns names.
const L = 1; // \p{L}
const N = 2; // \p{N}
const S = 4; // Oniguruma's \s (bpe-regex.ts's WHITE_SPACE), not JavaScript's
const NL = 8; // [\r\n]
const UP = 16; // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
const LO = 32; // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
const KNOWN = 128; // the entry has been filled
const LNS = L | N | S; // a code point in none of these is in [^\s\p{L}\p{N}]

/** A tester for one class expression, through the same translation the split regexes get. */
function tester(expr: string): RegExp {
  const t = translateSplitRegex(expr);
  if ('refused' in t) throw new Error(`class ${expr}: ${t.refused}`);
  return new RegExp(`^(?:${t.regex.source})$`, 'u');
}

const TESTS: readonly (readonly [number, RegExp])[] = [
  [L, tester('\\p{L}')],
  [N, tester('\\p{N}')],
  [S, tester('\\s')],
  [NL, tester('[\\r\\n]')],
  [UP, tester('[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]')],
  [LO, tester('[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]')],
];

function testClass(cp: number): number {
  const c = String.fromCodePoint(cp);
  let k = KNOWN;
  for (const [bit, re] of TESTS) if (re.test(c)) k |= bit;
  return k;
}

/** Classes of the BMP code points, filled on first sight (ASCII at load); astral ones in a bounded map. */
const BMP = new Uint8Array(0x10000);
for (let c = 0; c < 0x80; c++) BMP[c] = testClass(c);
const ASTRAL = new Map<number, number>();
/** Beyond this many distinct astral code points the map stops growing and the rest are tested each time. */
const ASTRAL_ENTRIES = 1 << 16;

function astralClass(cp: number): number {
  let k = ASTRAL.get(cp);
  if (k === undefined) {
    k = testClass(cp);
    if (ASTRAL.size < ASTRAL_ENTRIES) ASTRAL.set(cp, k);
  }
  return k;
}

function classOf(cp: number): number {
  if (cp < 0x10000) {
    const k = BMP[cp]!;
    return k !== 0 ? k : (BMP[cp] = testClass(cp));
  }
  return astralClass(cp);
}

const width = (cp: number): number => (cp > 0xffff ? 2 : 1);

/** The code point at `i` (a lone surrogate as itself); read by code unit unless it starts a pair. */
function codePointAt(s: string, i: number): number {
  const c = s.charCodeAt(i);
  return (c & 0xfc00) === 0xd800 ? s.codePointAt(i)! : c;
}

/** The end of the run from `i` of code points with some bit of `mask` (the hot loop: BMP classes read inline). */
function runOf(s: string, i: number, mask: number): number {
  const n = s.length;
  while (i < n) {
    const c = s.charCodeAt(i);
    if ((c & 0xfc00) === 0xd800) {
      const cp = s.codePointAt(i)!;
      if ((classOf(cp) & mask) === 0) break;
      i += width(cp);
    } else {
      const k = BMP[c]!;
      if (((k !== 0 ? k : (BMP[c] = testClass(c))) & mask) === 0) break;
      i++;
    }
  }
  return i;
}

/** The end of the run from `i` of code points with no bit of `mask`. */
function runNotOf(s: string, i: number, mask: number): number {
  const n = s.length;
  while (i < n) {
    const cp = codePointAt(s, i);
    if ((classOf(cp) & mask) !== 0) break;
    i += width(cp);
  }
  return i;
}

/** The end of `[\r\n]*` from `i`, or of `[\r\n/]*` when `slash`. */
function newlineTail(s: string, i: number, slash: boolean): number {
  for (;;) {
    const c = s.charCodeAt(i);
    if (c === 0x0a || c === 0x0d || (slash && c === 0x2f)) i++;
    else return i;
  }
}

/**
 * The end of `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at `i`, or -1; as translated, `s` also matches U+017F (its
 * simple case fold) and no other non-ASCII letter folds to one of these.
 */
function contraction(s: string, i: number): number {
  if (s.charCodeAt(i) !== 0x27) return -1;
  const a = s.charCodeAt(i + 1);
  if (a === 0x17f) return i + 2;
  if (a < 0x41 || a > 0x7a) return -1;
  const x = a | 0x20;
  if (x === 0x73 || x === 0x74 || x === 0x6d || x === 0x64) return i + 2; // s t m d
  const y = s.charCodeAt(i + 2) | 0x20;
  if ((x === 0x72 || x === 0x76) && y === 0x65) return i + 3; // re ve
  if (x === 0x6c && y === 0x6c) return i + 3; // ll
  return -1;
}

/** The end of `\p{N}{1,max}` from `i`, whose code point is a number. */
function numbers(s: string, i: number, max: number): number {
  let end = i + width(codePointAt(s, i));
  for (let k = 1; k < max && end < s.length; k++) {
    const cp = codePointAt(s, end);
    if ((classOf(cp) & N) === 0) break;
    end += width(cp);
  }
  return end;
}

/**
 * The last three alternatives, `\s*[\r\n]+|\s+(?!\S)|\s+`, at `p`, a white-space character (all of them
 * are in the BMP). Over the run of white space: `\s*` backtracks to the last CR or LF in it, and
 * `[\r\n]+` ends just after it; without one, the run ends the text (`(?!\S)` holds), or `\s+` gives back
 * its last character so that the lookahead sees white space, or, for a run of one, `\s+` takes it.
 */
function whiteSpace(s: string, p: number): number {
  const n = s.length;
  let e = p;
  let lastNewline = -1;
  for (; e < n; e++) {
    const k = classOf(s.charCodeAt(e));
    if ((k & S) === 0) break;
    if ((k & NL) !== 0) lastNewline = e;
  }
  if (lastNewline >= 0) return lastNewline + 1;
  if (e === n || e - p === 1) return e;
  return e - 1;
}

/**
 * The cl100k-style pattern (Qwen2/3 with `\p{N}`, Llama 3 with `\p{N}{1,3}`):
 * `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}| ?[^\s\p{L}\p{N}]+[\r\n]*|`
 * `\s*[\r\n]+|\s+(?!\S)|\s+`.
 */
function cl100k(maxNumbers: number): PieceScanner {
  return (s, p) => {
    const c = codePointAt(s, p);
    if (c === 0x27) {
      const e = contraction(s, p);
      if (e > 0) return e;
    }
    const k = classOf(c);
    const q = p + width(c);
    if ((k & L) !== 0) return runOf(s, q, L);
    // The optional leading character: anything but CR, LF, a letter or a number, before a letter.
    if ((k & (NL | N)) === 0 && q < s.length && (classOf(codePointAt(s, q)) & L) !== 0) return runOf(s, q, L);
    if ((k & N) !== 0) return numbers(s, p, maxNumbers);
    if ((k & S) === 0) return newlineTail(s, runNotOf(s, q, LNS), false);
    if (c === 0x20 && q < s.length && (classOf(codePointAt(s, q)) & LNS) === 0)
      return newlineTail(s, runNotOf(s, q, LNS), false);
    return whiteSpace(s, p);
  };
}

/**
 * `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+` then an optional contraction, from `q`; -1
 * when it does not match. The greedy first run backtracks to the last position where the second class
 * can start: the end of the run when a lower-class code point follows it, else the last code point
 * inside the run that is in both classes (which then ends the match, as the next one is upper-only).
 */
function upperThenLower(s: string, q: number): number {
  const n = s.length;
  let i = q;
  let lastBoth = -1;
  while (i < n) {
    const cp = codePointAt(s, i);
    const k = classOf(cp);
    if ((k & UP) === 0) break;
    i += width(cp);
    if ((k & LO) !== 0) lastBoth = i;
  }
  let e: number;
  if (i < n && (classOf(codePointAt(s, i)) & LO) !== 0) e = runOf(s, i, LO);
  else if (lastBoth >= 0) e = lastBoth;
  else return -1;
  const t = contraction(s, e);
  return t > 0 ? t : e;
}

/** `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*` then an optional contraction, or -1. */
function upperRun(s: string, q: number): number {
  const b = runOf(s, q, UP);
  if (b === q) return -1;
  const e = runOf(s, b, LO);
  const t = contraction(s, e);
  return t > 0 ? t : e;
}

/** A word alternative with the optional leading character (`lead`: the one at `p` may be it): with it first. */
function optionalLead(s: string, p: number, q: number, lead: boolean, word: (s: string, i: number) => number): number {
  const e = lead ? word(s, q) : -1;
  return e >= 0 ? e : word(s, p);
}

/**
 * gpt-oss's o200k pattern: two word alternatives (upper-class run then lower-class run, each with an
 * optional leading non-letter, non-number, non-CR/LF character and an optional contraction), then
 * `\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
 */
function o200k(s: string, p: number): number {
  const c = codePointAt(s, p);
  const k = classOf(c);
  const q = p + width(c);
  const lead = (k & (NL | L | N)) === 0;
  const first = optionalLead(s, p, q, lead, upperThenLower);
  if (first >= 0) return first;
  const second = optionalLead(s, p, q, lead, upperRun);
  if (second >= 0) return second;
  if ((k & N) !== 0) return numbers(s, p, 3);
  if ((k & S) === 0) return newlineTail(s, runNotOf(s, q, LNS), true);
  if (c === 0x20 && q < s.length && (classOf(codePointAt(s, q)) & LNS) === 0)
    return newlineTail(s, runNotOf(s, q, LNS), true);
  return whiteSpace(s, p);
}

const CONTRACTIONS = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
const TAIL = '\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+';
const cl100kPattern = (numbers: string): string =>
  `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}${numbers}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|${TAIL}`;
const UPPER = '[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]';
const LOWER = '[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]';
const LEAD = '[^\\r\\n\\p{L}\\p{N}]?';
const O200K =
  `${LEAD}${UPPER}*${LOWER}+${CONTRACTIONS}?|${LEAD}${UPPER}+${LOWER}*${CONTRACTIONS}?|` +
  `\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|${TAIL}`;

/** The Oniguruma patterns (as a `tokenizer.json` writes them) with a scanner, keyed by their translation. */
const SCANNERS = new Map<string, PieceScanner>();
for (const [pattern, scanner] of [
  [cl100kPattern(''), cl100k(1)],
  [cl100kPattern('{1,3}'), cl100k(3)],
  [O200K, o200k],
] as const) {
  const t = translateSplitRegex(pattern);
  if ('refused' in t) throw new Error(`scanned pattern refused: ${t.refused}`);
  SCANNERS.set(t.regex.source, scanner);
}

/** The scanner equal to a translated split regex (flags `gu`), or undefined: that pattern keeps the regex. */
export function scannerFor(split: RegExp): PieceScanner | undefined {
  return split.flags === 'gu' ? SCANNERS.get(split.source) : undefined;
}
