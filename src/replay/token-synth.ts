/**
 * Token streams for traces that carry only block ids (Mooncake `hash_ids`).
 *
 * Each hash id maps to a fixed chunk of `traceBlockSize` pseudo-random token
 * ids, a pure function of (seed, id); a request's prompt is its chunks
 * concatenated and cut to `input_length`. Equal ids therefore give equal
 * tokens, so two requests sharing their first k ids share exactly their first
 * k x traceBlockSize tokens, and engines hashing at any block size (16, 64, ...)
 * see the shared prefix, while different ids differ from their first token on
 * (with probability 1 - 1/vocab). This is how SGLang's bench_serving and aiperf
 * replay Mooncake traces.
 *
 * No state and no cache: a chunk is regenerated on demand at a few ns per
 * token (an integer mix per token), which is cheaper than holding 40,000+
 * chunks of 512 tokens in memory.
 */
import { fmix32 } from '../common/index.js';
import { KvgateError } from '../errors/index.js';

/** Token ids drawn from [0, DEFAULT_VOCAB_SIZE) unless told otherwise (a Llama-2-sized vocabulary, valid for any engine we simulate). */
export const DEFAULT_VOCAB_SIZE = 32_000;

export interface TokenSynthesizerOptions {
  /** Tokens per hash id (the trace's block size, 512 for Mooncake). */
  traceBlockSize: number;
  /** Changes every chunk; same seed, same tokens. */
  seed?: number;
  /** Token ids are in [0, vocabSize). */
  vocabSize?: number;
}

export class TokenSynthesizer {
  readonly traceBlockSize: number;
  readonly seed: number;
  readonly vocabSize: number;

  /** @throws KvgateError KVG_ERR_INVALID_ARGUMENT for a non-positive block size or a vocabulary outside [2, 2^31). */
  constructor(opts: TokenSynthesizerOptions) {
    if (!Number.isSafeInteger(opts.traceBlockSize) || opts.traceBlockSize < 1) {
      throw new KvgateError(
        'KVG_ERR_INVALID_ARGUMENT',
        `traceBlockSize must be a positive integer, got ${opts.traceBlockSize}`,
      );
    }
    const vocab = opts.vocabSize ?? DEFAULT_VOCAB_SIZE;
    if (!Number.isSafeInteger(vocab) || vocab < 2 || vocab > 0x7fffffff) {
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `vocabSize must be an integer in [2, 2^31), got ${vocab}`);
    }
    this.traceBlockSize = opts.traceBlockSize;
    this.seed = (opts.seed ?? 0) >>> 0;
    this.vocabSize = vocab;
  }

  /** Writes the first `count` tokens of the chunk of `hashId` into `out` at `offset` (appending in order to a plain array). */
  #writeChunk(hashId: number, out: number[], offset: number, count: number): void {
    // Ids up to 2^53 are split into two 32-bit halves so distinct ids give distinct states.
    const lo = hashId >>> 0;
    const hi = Math.floor(hashId / 4294967296) >>> 0;
    const state = fmix32(lo ^ fmix32(hi ^ fmix32(this.seed ^ 0x2545f491)));
    const vocab = this.vocabSize;
    // 31 bits keep the modulo in small-integer arithmetic (a 32-bit unsigned value is a double in V8).
    for (let j = 0; j < count; j++) {
      out[offset + j] = (fmix32((state + Math.imul(j + 1, 0x9e3779b9)) | 0) & 0x7fffffff) % vocab;
    }
  }

  /** The full chunk of one hash id. */
  chunk(hashId: number): Uint32Array {
    return Uint32Array.from(this.tokens([hashId], this.traceBlockSize));
  }

  /**
   * The prompt of a request: the chunks of `hashIds` concatenated, cut to
   * `inputLength`. Ids beyond what `inputLength` needs are ignored. A plain
   * array (of small integers): engines and routers copy prompts into their own
   * arrays, and V8 copies a plain array ~50x faster than a typed one.
   * @throws KvgateError KVG_ERR_INVALID_ARGUMENT when the ids cannot cover `inputLength` tokens.
   */
  tokens(hashIds: readonly number[], inputLength: number): number[] {
    const bs = this.traceBlockSize;
    if (hashIds.length * bs < inputLength) {
      throw new KvgateError(
        'KVG_ERR_INVALID_ARGUMENT',
        `${hashIds.length} hash ids of ${bs} tokens cannot cover ${inputLength} tokens`,
      );
    }
    const out: number[] = [];
    for (let k = 0, off = 0; off < inputLength; k++, off += bs) {
      this.#writeChunk(hashIds[k]!, out, off, Math.min(bs, inputLength - off));
    }
    return out;
  }
}
