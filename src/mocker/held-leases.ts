/**
 * The blocks finished `holdBlocksMs` requests keep for a remote decode to pull (vLLM's NIXL
 * prefill side): one lease per request id, handed over once by `pull`, released when it ends or
 * is aborted. The engine core owns the pool; a lease gives its blocks back through `release`.
 */
import type { PullResult } from './engine-types.js';
import type { Block } from './kv-cache.js';

/** Blocks a finished `holdBlocksMs` request keeps for a remote decode to pull. */
interface HeldBlocks {
  blocks: Block[];
  expiresAt: number;
  numTokens: number;
}

export class HeldLeases {
  readonly #held = new Map<string, HeldBlocks>();
  readonly #release: (blocks: Block[]) => void;

  /** @param release gives a lease's blocks back to the pool. */
  constructor(release: (blocks: Block[]) => void) {
    this.#release = release;
  }

  /** Requests holding blocks now. */
  get size(): number {
    return this.#held.size;
  }

  has(id: string): boolean {
    return this.#held.has(id);
  }

  /** Keeps `blocks` for request `id` until `expiresAt`; `numTokens` is what a pull hands over. */
  hold(id: string, held: HeldBlocks): void {
    this.#held.set(id, held);
  }

  /** The earliest time a lease ends; Infinity with none. */
  nextExpiry(): number {
    let t = Infinity;
    for (const h of this.#held.values()) t = Math.min(t, h.expiresAt);
    return t;
  }

  /**
   * Hands over the blocks request `id` kept (the NIXL read of a remote decode): checks the lease
   * and, when given, the block ids. The lease ends either way once it is found.
   */
  pull(id: string, blockIds: readonly number[] | undefined, now: number): PullResult {
    const held = this.#held.get(id);
    if (held === undefined)
      return {
        ok: false,
        reason: `no KV blocks are held for request ${id} (unknown, already pulled, or lease expired)`,
      };
    if (held.expiresAt <= now) {
      this.#end(id, held);
      return { ok: false, reason: `the KV lease of request ${id} expired` };
    }
    if (blockIds !== undefined) {
      const ids = held.blocks.map((b) => b.id);
      if (ids.length !== blockIds.length || ids.some((v, i) => v !== blockIds[i])) {
        return { ok: false, reason: `block ids do not match the blocks held for request ${id}` };
      }
    }
    this.#end(id, held);
    return { ok: true, numTokens: held.numTokens };
  }

  /** Ends every lease that ended by `now`. */
  releaseExpired(now: number): void {
    for (const [id, h] of this.#held) if (h.expiresAt <= now) this.#end(id, h);
  }

  /** Ends request `id`'s lease at once (an abort); false when it holds none. */
  release(id: string): boolean {
    const held = this.#held.get(id);
    if (held === undefined) return false;
    this.#end(id, held);
    return true;
  }

  #end(id: string, held: HeldBlocks): void {
    this.#held.delete(id);
    this.#release(held.blocks);
  }
}
