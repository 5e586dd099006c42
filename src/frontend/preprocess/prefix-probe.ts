/**
 * Refusing a prompt that is far over the token limit at a cost bounded by the
 * limit, not by the prompt: the text is tokenized in growing prefixes, and
 * tokenizing stops as soon as a prefix alone is over the limit. A prompt of
 * megabytes is then refused after tokenizing about as much text as the
 * longest prompt the model accepts (each probe at most doubles the last, so
 * the probes together cost at most about twice that).
 *
 * Why a prefix's count stands for the whole: each prefix is cut just before
 * a white-space character, where the byte-level pre-tokenizers of GPT-style
 * tokenizers (GPT-2, Llama 3, Qwen) start a new piece, so the prefix's tokens
 * are the whole text's first tokens. Cuts are not exact for every tokenizer
 * (a run of spaces, an added token cut in half), so a prefix refuses only when
 * it is over the limit by a margin; a prompt within the margin of the limit
 * is tokenized whole and checked exactly as before.
 */
import type { TextTokenizer } from '../../tokenizer/index.js';

/** Tokens a prefix must exceed the limit by before it refuses the whole prompt. */
const MARGIN_TOKENS = 64;

/**
 * Only texts of more than this many characters per token of the limit are probed. Prompts
 * within the limit average 3 to 5 characters per token (English, code), so they are never
 * probed and pay nothing; a text past this that is within the limit after all (mostly runs of
 * spaces) pays for its probes, at most about twice its own tokenization.
 */
const PROBE_ABOVE_CHARS_PER_TOKEN = 8;

/** The first prefix has this many characters per token of the limit. */
const FIRST_PROBE_CHARS_PER_TOKEN = 2;

/** The end of the prefix of `text` of about `chars` characters: just before a white-space character when one is near. */
function cutBefore(text: string, chars: number): number {
  if (chars >= text.length) return text.length;
  const window = Math.max(16, chars >> 4);
  for (let i = chars; i > chars - window && i > 0; i--) {
    const c = text.charCodeAt(i);
    if (c === 0x20 || c === 0x0a || c === 0x09 || c === 0x0d) return i;
  }
  return chars;
}

/**
 * Tokens counted in the first prefix found over `limit + MARGIN_TOKENS`, or undefined when
 * the prompt may be within the limit (then it is tokenized whole).
 */
export async function prefixOverLimit(
  tok: TextTokenizer,
  text: string,
  limit: number,
  addSpecialTokens: boolean,
): Promise<number | undefined> {
  if (text.length <= limit * PROBE_ABOVE_CHARS_PER_TOKEN) return undefined;
  let chars = limit * FIRST_PROBE_CHARS_PER_TOKEN;
  for (;;) {
    const end = cutBefore(text, chars);
    if (end >= text.length) return undefined; // the whole text: its own tokenization decides
    const tokens = (await tok.encode(text.slice(0, end), { addSpecialTokens })).length;
    if (tokens > limit + MARGIN_TOKENS) return tokens;
    // Aim past the limit by this prefix's characters per token; grow by a quarter at least, double at most.
    const perToken = end / Math.max(1, tokens);
    chars = Math.ceil(Math.max(end * 1.25, Math.min(end * 2, (limit + 2 * MARGIN_TOKENS) * perToken * 1.1)));
  }
}
