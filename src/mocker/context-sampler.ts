/**
 * The simulated model's next token: a pure function of the context (every
 * token so far, prompt then generated) and the seed, like a real model whose
 * output depends on what it has read and not on which engine, which request
 * order or which batch it ran in. A request resumed elsewhere with its prompt
 * followed by the tokens already generated (kvgate's migration) therefore
 * continues exactly as the uninterrupted request would have.
 *
 * The context is folded into a 32-bit state one token at a time (murmur3's
 * mixing), so each step costs O(1) after the prompt.
 */
import { fmix32 } from '../common/index.js';

/** `fmix32` as an unsigned 32-bit state. */
const fmix = (h: number): number => fmix32(h) >>> 0;

export class ContextSampler {
  #state: number;

  constructor(seed: number, context: ArrayLike<number>) {
    this.#state = fmix((seed ^ 0x9e3779b9) >>> 0);
    for (let i = 0; i < context.length; i++) this.append(context[i]!);
  }

  /** The context grew by `tokenId`. */
  append(tokenId: number): void {
    this.#state = fmix((Math.imul(this.#state ^ tokenId, 0x01000193) + 0x7f4a7c15) >>> 0);
  }

  /** The next token's index in a vocabulary of `size` (the context is unchanged until `append`). */
  next(size: number): number {
    return Math.floor((fmix(this.#state ^ 0x2545f491) / 0x1_0000_0000) * size);
  }
}
