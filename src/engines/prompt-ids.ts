/**
 * A chunk's top-level `prompt_token_ids` member, cut out of its text before
 * the parse.
 *
 * kvgate asks vLLM for `return_token_ids` so that a migration can resume a
 * stream, and a chat's first chunk then carries every prompt id: about 600 KB
 * of JSON at 128k tokens, parsed, recorded and re-serialised on every request
 * although a migration reads it on few. The member's text is found with an
 * index scan, the rest of the chunk is parsed without it, and the ids are
 * parsed only when asked for (`ids()`).
 *
 * Why the cut is exact for JSON: the key is taken only where a scan from the
 * start of the text (tracking strings and their escapes, and the nesting of
 * objects and arrays) finds it outside any string and directly in the
 * top-level object; its value must open with `[` and hold no `[`, `{` or
 * `"` before the first `]`, so that `]` closes it: a flat array of scalars.
 * The member and the comma that joined it to a neighbour are removed, which
 * leaves valid JSON of the same object less that one member whenever the
 * whole text was valid. Any other text (no such member, a nested one, a value
 * of another form) is not cut: the caller parses it whole, as before.
 */

const KEY = '"prompt_token_ids"';
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;
/** Texts shorter than this are parsed whole: the cut saves nothing worth a scan on a small chunk. */
const MIN_CUT_LENGTH = 1024;

/** A chunk's text without its top-level `prompt_token_ids`, and that member's value (a JSON array's text). */
export interface PromptIdsCut {
  /** The chunk's text less the member (and one comma): valid JSON whenever the whole text was. */
  readonly rest: string;
  /** The member's value, `[` to `]` inclusive. */
  readonly ids: string;
}

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/**
 * Where `KEY` starts as a member name of the top-level object (see the file comment); -1 when it does not. The
 * scan runs from the start of the text to the key, so it costs what precedes the member, not the member.
 */
function topLevelKeyAt(data: string): number {
  let at = data.indexOf(KEY);
  let depth = 0;
  let inString = false;
  let i = 0;
  while (at >= 0) {
    for (; i < at; i++) {
      const c = data.charCodeAt(i);
      if (inString) {
        if (c === BACKSLASH) i++;
        else if (c === QUOTE) inString = false;
      } else if (c === QUOTE) inString = true;
      else if (c === OPEN_BRACE || c === OPEN_BRACKET) depth++;
      else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) depth--;
    }
    // i can pass `at` by one when an escape's backslash sat just before it: that occurrence is inside a string.
    if (i === at && !inString && depth === 1) return at;
    at = data.indexOf(KEY, at + 1);
  }
  return -1;
}

/** The cut of `data`'s top-level `prompt_token_ids` (see the file comment); undefined when it has none to cut. */
export function cutPromptIds(data: string): PromptIdsCut | undefined {
  if (data.length < MIN_CUT_LENGTH) return undefined;
  const key = topLevelKeyAt(data);
  if (key < 0) return undefined;
  let p = key + KEY.length;
  while (p < data.length && isSpace(data.charCodeAt(p))) p++;
  if (data.charCodeAt(p) !== COLON) return undefined;
  p++;
  while (p < data.length && isSpace(data.charCodeAt(p))) p++;
  if (data.charCodeAt(p) !== OPEN_BRACKET) return undefined;
  const open = p;
  const close = data.indexOf(']', open);
  if (close < 0) return undefined;
  for (const c of ['[', '{', '"']) {
    const inner = data.indexOf(c, open + 1);
    if (inner >= 0 && inner < close) return undefined;
  }
  const ids = data.slice(open, close + 1);
  // The member leaves with one comma: the one before it, or (when it is the object's first) the one after it.
  let before = key - 1;
  while (before >= 0 && isSpace(data.charCodeAt(before))) before--;
  if (data.charCodeAt(before) === COMMA) return { rest: data.slice(0, before) + data.slice(close + 1), ids };
  let after = close + 1;
  while (after < data.length && isSpace(data.charCodeAt(after))) after++;
  if (data.charCodeAt(after) === COMMA) after++;
  return { rest: data.slice(0, key) + data.slice(after), ids };
}
