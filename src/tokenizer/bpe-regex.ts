/**
 * Translates a pre-tokenizer regex of a `tokenizer.json` (written for Oniguruma, which Hugging Face's
 * `tokenizers` compiles it with) into a JavaScript `u`-flag RegExp that matches exactly the same spans, or
 * says why it cannot. Only constructs whose meaning is the same in both engines pass through; the ones that
 * differ are rewritten (`\s`, `(?i:...)` of plain letters) and everything else is refused, so a refusal keeps
 * the native tokenizer rather than risking different token ids.
 */

/**
 * Oniguruma's Unicode `\s`: U+0009..U+000D, U+0085, and the Line, Paragraph and Space separators. JavaScript's
 * `\s` differs (it adds U+FEFF and lacks U+0085), so `\s` is always spelled out.
 */
const WHITE_SPACE = '\\t\\n\\x0B\\f\\r \\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000';

/** GPT-2's split, the one a `ByteLevel` pre-tokenizer with `use_regex` applies (in Oniguruma syntax). */
export const GPT2_SPLIT = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/**
 * Code points that Unicode simple case folding makes equal to an ASCII letter besides its other case
 * (CaseFolding.txt: U+017F LATIN SMALL LETTER LONG S folds to `s`, U+212A KELVIN SIGN to `k`).
 */
const EXTRA_FOLDS: Record<string, string> = { s: '\u017F', k: '\u212A' };

/**
 * ASCII letter runs that full case folding lets a single code point match under `(?i)` (U+00DF and U+1E9E
 * fold to `ss`, the ligatures U+FB00..U+FB06 to `ff`, `fi`, `fl`, `ffi`, `ffl`, `st`): a group holding one is
 * refused, since a character class cannot express a one-to-many fold.
 */
const MULTI_FOLDS = ['ss', 'ff', 'fi', 'fl', 'st'];

const PUNCT_ESCAPES = new Set([...'\\^$.|?*+()[]{}/-']);

type Translated = { source: string } | { refused: string };

/** `(?i:alt|alt)` of ASCII letters and apostrophes as a group of character classes, or why not. */
function caseInsensitiveGroup(body: string): Translated {
  if (!/^['A-Za-z|]+$/.test(body)) return { refused: `case-insensitive group (?i:${body}) holds more than letters` };
  const lower = body.toLowerCase();
  const fold = MULTI_FOLDS.find((m) => lower.includes(m));
  if (fold !== undefined)
    return { refused: `case-insensitive group (?i:${body}) holds the multi-character fold ${fold}` };
  let out = '(?:';
  for (const c of lower) {
    if (c >= 'a' && c <= 'z') out += `[${c}${c.toUpperCase()}${EXTRA_FOLDS[c] ?? ''}]`;
    else out += c;
  }
  return { source: `${out})` };
}

/** One escape (`src[i]` is the backslash); returns the translation and how many characters it used. */
function escapeAt(src: string, i: number, inClass: boolean): { out: string; used: number } | { refused: string } {
  const d = src[i + 1];
  if (d === 's') return { out: inClass ? WHITE_SPACE : `[${WHITE_SPACE}]`, used: 2 };
  if (d === 'S') {
    if (inClass) return { refused: '\\S inside a character class' };
    return { out: `[^${WHITE_SPACE}]`, used: 2 };
  }
  if (d === 'p' || d === 'P') {
    const m = /^\{([A-Za-z_]+)\}/.exec(src.slice(i + 2));
    if (m === null) return { refused: `property escape at ${i}` };
    return { out: `\\${d}{${m[1]!}}`, used: 2 + m[0].length };
  }
  if (d !== undefined && 'rntfv'.includes(d)) return { out: `\\${d}`, used: 2 };
  if (d !== undefined && PUNCT_ESCAPES.has(d)) return { out: `\\${d}`, used: 2 };
  return { refused: `escape \\${d ?? ''}` };
}

/** The pieces outside a character class; returns the translation and how many characters it used. */
function outsideAt(src: string, i: number): { out: string; used: number } | { refused: string } {
  const c = src[i]!;
  if (c === '(') {
    if (src.startsWith('(?i:', i)) {
      const end = src.indexOf(')', i);
      const g = caseInsensitiveGroup(src.slice(i + 4, end < 0 ? src.length : end));
      if ('refused' in g) return g;
      return { out: g.source, used: end - i + 1 };
    }
    if (src.startsWith('(?:', i) || src.startsWith('(?=', i) || src.startsWith('(?!', i))
      return { out: src.slice(i, i + 3), used: 3 };
    if (src[i + 1] === '?') return { refused: `group ${src.slice(i, i + 4)}` };
    return { out: '(?:', used: 1 };
  }
  if (c === '.' || c === '^' || c === '$') return { refused: `${c} (its meaning differs between engines)` };
  if ((c === '*' || c === '+' || c === '?' || c === '}') && src[i + 1] === '+')
    return { refused: 'possessive quantifier' };
  if (c === '{') {
    const m = /^\{\d+(,\d*)?\}/.exec(src.slice(i));
    if (m === null) return { refused: `brace at ${i} is not a quantifier` };
    return { out: m[0], used: m[0].length };
  }
  return { out: c, used: 1 };
}

/**
 * The JavaScript RegExp (flags `gu`) equal to an Oniguruma split pattern, or why there is none.
 * Accepted: literals, `\r \n \t \f \v`, escaped punctuation, `\p{..}`/`\P{..}`, `\s`, `\S` (outside classes),
 * character classes without nesting, groups `( (?: (?= (?!`, `(?i:..)` of plain letters, greedy and lazy
 * quantifiers, alternation.
 */
export function translateSplitRegex(src: string): { regex: RegExp } | { refused: string } {
  let out = '';
  let inClass = false;
  for (let i = 0; i < src.length;) {
    const c = src[i]!;
    let step: { out: string; used: number } | { refused: string };
    if (c === '\\') step = escapeAt(src, i, inClass);
    else if (inClass) {
      if (c === '[' || (c === '&' && src[i + 1] === '&'))
        step = { refused: 'nested character class or class operator' };
      else {
        if (c === ']') inClass = false;
        step = { out: c, used: 1 };
      }
    } else if (c === '[') {
      inClass = true;
      const neg = src[i + 1] === '^';
      const first = src[i + (neg ? 2 : 1)];
      step = first === ']' ? { refused: 'class starting with ]' } : { out: neg ? '[^' : '[', used: neg ? 2 : 1 };
    } else step = outsideAt(src, i);
    if ('refused' in step) return step;
    out += step.out;
    i += step.used;
  }
  if (inClass) return { refused: 'unterminated character class' };
  try {
    return { regex: new RegExp(out, 'gu') };
  } catch (err) {
    return { refused: `not a valid JavaScript regex: ${(err as Error).message}` };
  }
}
