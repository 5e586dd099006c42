/**
 * A lower bound on a prompt's token count that costs one pass over its
 * characters, so a prompt certainly over the limit is refused without being
 * tokenized (tokenizing megabytes takes seconds of a preprocessing thread).
 *
 * Why it is sound, for a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen):
 * every token is a string of bytes, and a text's tokens partition its UTF-8
 * bytes. Give byte b the weight 1 / L(b), where L(b) is the length of the
 * longest token (vocabulary or added) that contains b. A token of length L
 * holds only bytes with L(b) >= L, so its bytes weigh at most 1 in total;
 * hence the weight of any subset of a text's bytes is at most its token count.
 * The bound sums the weights of the ASCII characters that Unicode
 * normalization cannot change: only NFC/NFD/NFKC/NFKD normalizers are
 * accepted, and an ASCII character directly before a non-ASCII one is skipped
 * (it could compose with a combining mark). Digits weigh 1 in most such
 * vocabularies, letters about 1/40, runs of spaces about 1/128.
 *
 * Other tokenizers (WordPiece or Unigram, whose unknown-word token can cover
 * any length, or other normalizers) get no bound: their prompts are
 * tokenized and then checked.
 */
import { tokenizerJsonOf } from '../../tokenizer/index.js';

interface TokenizerJson {
  normalizer?: { type?: string; normalizers?: { type?: string }[] } | null;
  pre_tokenizer?: { type?: string; pretokenizers?: { type?: string }[] } | null;
  decoder?: { type?: string } | null;
  model?: { type?: string; vocab?: Record<string, number> };
  added_tokens?: { content: string }[];
}

/**
 * A lower bound on the token count of a text. With `stopAbove`, the pass may stop as soon as the bound
 * exceeds it (the bound so far, over a prefix, is still a bound for the whole): a prompt far over the limit
 * is then refused after reading about as much of it as the limit allows, not all of it.
 */
export type TokenFloor = (text: string, stopAbove?: number) => number;

const UNICODE_NORMAL_FORMS = new Set(['NFC', 'NFD', 'NFKC', 'NFKD']);

/** The byte each character of GPT-2's byte-level alphabet stands for (the inverse of `bytes_to_unicode`). */
function byteLevelAlphabet(): Map<number, number> {
  const printable = (b: number): boolean => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  const out = new Map<number, number>();
  let shifted = 0;
  for (let b = 0; b < 256; b++) out.set(printable(b) ? b : 256 + shifted++, b);
  return out;
}

function normalizerIsSafe(n: TokenizerJson['normalizer']): boolean {
  if (n === undefined || n === null) return true;
  if (n.type === 'Sequence') return (n.normalizers ?? []).every((x) => UNICODE_NORMAL_FORMS.has(x.type ?? ''));
  return UNICODE_NORMAL_FORMS.has(n.type ?? '');
}

function isByteLevel(json: TokenizerJson): boolean {
  const pre = json.pre_tokenizer;
  const parts = pre?.type === 'Sequence' ? (pre.pretokenizers ?? []) : pre !== undefined && pre !== null ? [pre] : [];
  return parts.some((p) => p.type === 'ByteLevel') || json.decoder?.type === 'ByteLevel';
}

/** The weight of each ASCII byte from a parsed tokenizer.json, or undefined when no sound bound exists for it. */
function asciiWeights(json: TokenizerJson): Float64Array | undefined {
  if (
    json.model?.type !== 'BPE' ||
    json.model.vocab === undefined ||
    !isByteLevel(json) ||
    !normalizerIsSafe(json.normalizer)
  )
    return undefined;
  const alphabet = byteLevelAlphabet();
  const longest = new Uint32Array(256);
  const note = (b: number, len: number): void => {
    if (len > longest[b]!) longest[b] = len;
  };
  for (const piece of Object.keys(json.model.vocab)) {
    for (let i = 0; i < piece.length; i++) {
      const b = alphabet.get(piece.charCodeAt(i));
      // A piece outside the byte-level alphabet: not the tokenizer this bound is about.
      if (b === undefined) return undefined;
      note(b, piece.length);
    }
  }
  for (const t of json.added_tokens ?? []) {
    const bytes = Buffer.from(t.content, 'utf8');
    for (const b of bytes) note(b, bytes.length);
  }
  const weights = new Float64Array(128);
  // A byte no token contains cannot occur in a tokenized text at all; weigh it as a token of its own.
  for (let b = 0; b < 128; b++) weights[b] = 1 / Math.max(1, longest[b]!);
  return weights;
}

/** The token floor of a tokenizer.json's tokenizer, or undefined when it has none (see the module comment). */
export function tokenFloorOf(tokenizerJsonPath: string): TokenFloor | undefined {
  const weights = asciiWeights(tokenizerJsonOf(tokenizerJsonPath) as TokenizerJson);
  if (weights === undefined) return undefined;
  return (text, stopAbove = Infinity) => {
    let sum = 0;
    const n = text.length;
    // The stop is checked every 4,096 characters, rounded to keep the loop tight; the margin of 1 keeps the
    // rounded-down result above `stopAbove` when the pass stops.
    const stop = stopAbove + 1;
    for (let from = 0; from < n && sum <= stop; from += 4096) {
      const to = Math.min(n, from + 4096);
      for (let i = from; i < to; i++) {
        const c = text.charCodeAt(i);
        if (c < 128 && (i + 1 === n || text.charCodeAt(i + 1) < 128)) sum += weights[c]!;
      }
    }
    // Floating-point sums of many small weights drift; stay below the exact value.
    return Math.floor(sum * (1 - 1e-9));
  };
}
