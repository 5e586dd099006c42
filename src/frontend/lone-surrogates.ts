/**
 * A JSON body whose strings hold a lone UTF-16 surrogate (`"\ud800"`: an
 * escape JSON's grammar allows but that names no Unicode character) is
 * refused: such a string cannot be encoded as UTF-8, so an engine refuses the
 * body (vLLM's JSON parser does), and the gateway's tokenizer would have
 * routed it by ids of a replacement character. Raw UTF-8 cannot encode a
 * surrogate (the body's UTF-8 check refuses one), so only `\u` escapes can
 * make one: the text is searched for those, and only a body that has one is
 * walked to name the field.
 */
import { KvgateError } from '../errors/index.js';

const BACKSLASH = 0x5c;
const LOWER_U = 0x75;

/** A `\u` escape of a surrogate; whether it is an escape (not an escaped backslash then `u`) is checked apart. */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F][0-9a-fA-F]{2}/g;

/** Whether the backslash at `at` begins an escape: an even number of backslashes before it. */
function escapes(text: string, at: number): boolean {
  let n = 0;
  while (at - n - 1 >= 0 && text.charCodeAt(at - n - 1) === BACKSLASH) n++;
  return n % 2 === 0;
}

/** The code unit of the escape at `at` (`\uXXXX`), or -1 when there is none there. */
function escapeAt(text: string, at: number): number {
  if (text.charCodeAt(at) !== BACKSLASH || text.charCodeAt(at + 1) !== LOWER_U) return -1;
  const v = Number.parseInt(text.slice(at + 2, at + 6), 16);
  return Number.isNaN(v) ? -1 : v;
}

/** Whether the JSON `text` (valid: it parsed) escapes a surrogate that is not half of a pair. */
function hasLoneSurrogateEscape(text: string): boolean {
  // Most bodies escape no surrogate at all: two plain substring searches (vectorised) rule that out at a fraction
  // of the regular expression's scan of the whole text, and otherwise tell it where the first candidate is.
  const lower = text.indexOf('\\ud');
  const upper = text.indexOf('\\uD');
  if (lower < 0 && upper < 0) return false;
  const re = new RegExp(SURROGATE_ESCAPE);
  re.lastIndex = lower < 0 ? upper : upper < 0 ? lower : Math.min(lower, upper);
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    if (!escapes(text, m.index)) continue;
    const u = escapeAt(text, m.index);
    // A low half here was not taken by a high one just before it (that one skipped it).
    if (u >= 0xdc00) return true;
    const next = escapeAt(text, m.index + 6);
    if (next < 0xdc00 || next > 0xdfff) return true;
    re.lastIndex = m.index + 12;
  }
  return false;
}

const wellFormed = (s: string): boolean => (s as unknown as { isWellFormed(): boolean }).isWellFormed();

/** The path of the first string (or key) of `value` that is not well-formed UTF-16, or undefined. */
function lonePath(value: unknown, path: string): string | undefined {
  if (typeof value === 'string') return wellFormed(value) ? undefined : path;
  if (typeof value !== 'object' || value === null) return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const p = lonePath(value[i], `${path}[${i}]`);
      if (p !== undefined) return p;
    }
    return undefined;
  }
  for (const [k, v] of Object.entries(value)) {
    const at = path === '' ? k : `${path}.${k}`;
    if (!wellFormed(k)) return at;
    const p = lonePath(v, at);
    if (p !== undefined) return p;
  }
  return undefined;
}

/**
 * Refuses a parsed body whose JSON text escapes a lone surrogate.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST, `param` the field holding it.
 */
export function refuseLoneSurrogates(text: string, body: Record<string, unknown>): void {
  if (!hasLoneSurrogateEscape(text)) return;
  const param = lonePath(body, '') ?? null;
  throw new KvgateError(
    'KVG_ERR_INVALID_REQUEST',
    `${param ?? 'the request body'} holds a lone UTF-16 surrogate escape (a \\uD800-\\uDFFF not in a pair), ` +
      'which is no Unicode character; send the text as valid Unicode',
    { param },
  );
}
