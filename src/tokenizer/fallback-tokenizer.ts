/**
 * The fallback tokenizer, used when no tokenizer.json is configured. It is
 * deterministic, needs no files, and round-trips any text exactly:
 *
 * - the text is UTF-8 encoded and cut into groups of 3 bytes from the start;
 * - a full group b0 b1 b2 is token `b0 | b1 << 8 | b2 << 16` (0 .. 2^24-1);
 * - a trailing group of 1 byte is `2^24 + b0`; of 2 bytes, `2^24 + 256 + (b0 | b1 << 8)`.
 *
 * So about 3 characters of English per token, and two texts sharing a prefix
 * share their tokens up to the last full group before they differ, which is
 * what prefix caching needs. No special tokens; BOS/EOS are never added. Chat
 * messages are rendered with the ChatML template (`CHATML_TEMPLATE`).
 *
 * Pinned by test/tokenizer/tokenizer.test.ts.
 */
import { ChatTemplate, CHATML_TEMPLATE } from './chat-template.js';
import type { ChatMessage, RenderChatOptions, SampleVocabulary, TextTokenizer } from './types.js';

const FULL_GROUPS = 1 << 24;
const ONE_BYTE_BASE = FULL_GROUPS;
const TWO_BYTE_BASE = FULL_GROUPS + 256;
/** Every id below this decodes; ids at or above are out of vocabulary. */
export const FALLBACK_VOCAB_SIZE = TWO_BYTE_BASE + 65536;

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: false });

export function fallbackEncode(text: string): number[] {
  const bytes = encoder.encode(text);
  const out: number[] = [];
  let i = 0;
  for (; i + 3 <= bytes.length; i += 3) out.push(bytes[i]! | (bytes[i + 1]! << 8) | (bytes[i + 2]! << 16));
  const rest = bytes.length - i;
  if (rest === 1) out.push(ONE_BYTE_BASE + bytes[i]!);
  else if (rest === 2) out.push(TWO_BYTE_BASE + (bytes[i]! | (bytes[i + 1]! << 8)));
  return out;
}

/** Decodes ids; ids out of vocabulary decode to U+FFFD, invalid UTF-8 likewise. */
export function fallbackDecode(ids: readonly number[]): string {
  const bytes: number[] = [];
  let out = '';
  for (const id of ids) {
    if (!Number.isInteger(id) || id < 0 || id >= FALLBACK_VOCAB_SIZE) {
      out += decoder.decode(Uint8Array.from(bytes)) + '\uFFFD';
      bytes.length = 0;
    } else if (id < FULL_GROUPS) {
      bytes.push(id & 0xff, (id >>> 8) & 0xff, id >>> 16);
    } else if (id < TWO_BYTE_BASE) {
      bytes.push(id - ONE_BYTE_BASE);
    } else {
      const v = id - TWO_BYTE_BASE;
      bytes.push(v & 0xff, v >>> 8);
    }
  }
  return out + decoder.decode(Uint8Array.from(bytes));
}

let sampleVocabulary: SampleVocabulary | undefined;

/** 676 word tokens " aa" .. " zz" (a space and two lowercase letters). */
function fallbackSampleVocabulary(): SampleVocabulary {
  if (sampleVocabulary === undefined) {
    const ids: number[] = [];
    const texts: string[] = [];
    // Ordered by id: the third byte is the most significant.
    for (let b2 = 0x61; b2 <= 0x7a; b2++) {
      for (let b1 = 0x61; b1 <= 0x7a; b1++) {
        ids.push(0x20 | (b1 << 8) | (b2 << 16));
        texts.push(` ${String.fromCharCode(b1)}${String.fromCharCode(b2)}`);
      }
    }
    sampleVocabulary = { ids: Uint32Array.from(ids), texts };
  }
  return sampleVocabulary;
}

class FallbackTokenizer implements TextTokenizer {
  readonly kind = 'fallback' as const;
  readonly source = 'fallback';
  readonly vocabSize = FALLBACK_VOCAB_SIZE;
  readonly #template = new ChatTemplate(CHATML_TEMPLATE);

  encode(text: string): Promise<number[]> {
    return Promise.resolve(fallbackEncode(text));
  }
  decode(ids: readonly number[]): Promise<string> {
    return Promise.resolve(fallbackDecode(ids));
  }
  renderChat(messages: readonly ChatMessage[], opts?: RenderChatOptions): string {
    return this.#template.render(messages, opts);
  }
  renderChatParts(messages: readonly ChatMessage[], opts?: RenderChatOptions): readonly string[] {
    return this.#template.renderParts(messages, opts);
  }
  sampleVocabulary(): SampleVocabulary {
    return fallbackSampleVocabulary();
  }
  specialIds(): ReadonlySet<number> {
    return NO_SPECIAL_IDS;
  }
}

/** The fallback has no special tokens: its ChatML markers are plain text. */
const NO_SPECIAL_IDS: ReadonlySet<number> = new Set();

let shared: FallbackTokenizer | undefined;

/** The fallback tokenizer (stateless; one shared instance). */
export function fallbackTokenizer(): TextTokenizer {
  shared ??= new FallbackTokenizer();
  return shared;
}
