/**
 * A hybrid engine's KV-cache groups beside the block pool (`--kv-groups full,sliding:128` or `full,mamba`):
 * the pool is group 0 (full attention); each other group keeps the blocks it caches, evicts them and publishes
 * its own KV events (`group_idx`, `kv_cache_spec_kind`, `kv_cache_spec_sliding_window`), as vLLM's hybrid
 * KV-cache manager does:
 * - a sliding-window group caches every block the request computes, then frees those that slid out of the
 *   window (`remove_skipped_blocks`): they are evicted first when the group needs room;
 * - a Mamba group keeps only the state at the end of each computed chunk (vLLM's `align` mode): its event
 *   names that block alone, the blocks before it in the range being null (left out of `block_hashes`).
 * A prefix is reused only as far as every group can serve it (core's `hybridHitBlocks`), which is what the
 * engine reports as `cached_tokens`.
 *
 * Simplification, stated: each group holds up to `capacity` blocks of its own (vLLM shares one pool between
 * groups of equal page size); eviction within a group follows vLLM's order (freed blocks first, oldest first).
 */
import { FULL_ATTENTION_GROUP, hybridHitBlocks, parseKvGroupLabel, type KvGroupSpec } from '../core/index.js';
import { KvgateError } from '../errors/index.js';
import type { KvEvent } from './engine-types.js';

/** One non-primary group: its cached blocks (sequence hash -> engine hash), in eviction order. */
interface Group {
  readonly idx: number;
  readonly spec: KvGroupSpec;
  /** Blocks no running request needs (slid out of its window): evicted first, oldest first. */
  readonly freed: Map<bigint, bigint>;
  /** Other cached blocks, least recently used first. */
  readonly live: Map<bigint, bigint>;
}

/** The group layout a `--kv-groups` list states; group 0 must be full attention (the block pool). */
export function parseKvGroups(list: string): KvGroupSpec[] {
  const specs = list.split(',').map(parseKvGroupLabel);
  const bad = specs.find((s) => s.kind === 'unknown');
  if (bad !== undefined || specs[0]?.kind !== 'full')
    throw new KvgateError(
      'KVG_ERR_INVALID_CONFIG',
      `kvGroups ${JSON.stringify(list)}: expected a list starting with full, of full, sliding:<tokens> and mamba`,
      { field: 'kvGroups', value: list },
    );
  return specs;
}

export class HybridKvGroups {
  readonly #groups: Group[];
  readonly #blockSize: number;
  readonly #capacity: number;
  #removed: KvEvent[] = [];

  /** `specs[0]` is the pool's group (full attention); one `Group` per later spec. */
  constructor(specs: readonly KvGroupSpec[], blockSize: number, capacity: number) {
    this.#groups = specs.slice(1).map((spec, i) => ({ idx: i + 1, spec, freed: new Map(), live: new Map() }));
    this.#blockSize = blockSize;
    this.#capacity = capacity;
  }

  /** The longest hit every group serves, at most `fullHit` blocks (the pool's leading run). */
  hitBlocks(seqHashes: readonly bigint[], fullHit: number): number {
    const rules = [
      { spec: FULL_ATTENTION_GROUP, held: (i: number) => i < fullHit },
      ...this.#groups.map((g) => ({
        spec: g.spec,
        held: (i: number) => g.live.has(seqHashes[i]!) || g.freed.has(seqHashes[i]!),
      })),
    ];
    return hybridHitBlocks(rules, this.#blockSize, fullHit);
  }

  /**
   * Blocks [from, to) of a request were just committed to the pool: each group caches its share and
   * publishes it. `computedTokens` is the request's position (its window's end).
   */
  commit(
    seqHashes: readonly bigint[],
    engineHashOf: (k: number) => bigint,
    tokens: readonly number[],
    at: Commit,
  ): KvEvent[] {
    const out: KvEvent[] = [];
    const { from, to, computedTokens, loraName, cacheSalt } = at;
    if (to <= from) return out;
    for (const g of this.#groups) {
      const first = g.spec.kind === 'mamba' ? to - 1 : from;
      const hashes: bigint[] = [];
      for (let k = first; k < to; k++) {
        const seq = seqHashes[k]!;
        g.freed.delete(seq);
        g.live.delete(seq);
        const hash = engineHashOf(k);
        g.live.set(seq, hash);
        hashes.push(hash);
      }
      out.push({
        type: 'stored',
        blockHashes: hashes,
        parentBlockHash: from === 0 ? null : engineHashOf(from - 1),
        tokenIds: tokens.slice(from * this.#blockSize, to * this.#blockSize),
        blockSize: this.#blockSize,
        loraName,
        cacheSalt,
        groupIdx: g.idx,
        specKind: g.spec.wireKind,
        slidingWindow: g.spec.slidingWindow ?? null,
      });
      if (g.spec.kind === 'sliding_window') this.#slide(g, seqHashes, computedTokens);
      this.#evict(g);
    }
    return out;
  }

  /** Removals since the last call (one BlockRemoved per block, as vLLM sends them). */
  drainEvicted(): KvEvent[] {
    const out = this.#removed;
    this.#removed = [];
    return out;
  }

  /** Forgets every group's blocks (the pool's reset: the engine's `cleared` event covers them all), unpublished. */
  reset(): void {
    for (const g of this.#groups) {
      g.freed.clear();
      g.live.clear();
    }
    this.#removed = [];
  }

  /** Blocks a group holds (tests, metrics). */
  cachedBlocks(groupIdx: number): number {
    const g = this.#groups[groupIdx - 1];
    return g === undefined ? 0 : g.live.size + g.freed.size;
  }

  /** Blocks entirely before the window of a request at `computedTokens` are freed (kept cached, evicted first). */
  #slide(g: Group, seqHashes: readonly bigint[], computedTokens: number): void {
    const outside = Math.floor(Math.max(0, computedTokens - g.spec.slidingWindow!) / this.#blockSize);
    for (let k = 0; k < outside && k < seqHashes.length; k++) {
      const seq = seqHashes[k]!;
      const hash = g.live.get(seq);
      if (hash === undefined) continue;
      g.live.delete(seq);
      g.freed.set(seq, hash);
    }
  }

  #evict(g: Group): void {
    while (g.live.size + g.freed.size > this.#capacity) {
      const from = g.freed.size > 0 ? g.freed : g.live;
      const [seq, hash] = from.entries().next().value as [bigint, bigint];
      from.delete(seq);
      this.#removed.push({ type: 'removed', blockHashes: [hash], groupIdx: g.idx });
    }
  }
}

/** Where a request's commit stands (see `HybridKvGroups.commit`). */
export interface Commit {
  readonly from: number;
  readonly to: number;
  readonly computedTokens: number;
  readonly loraName: string | null;
  readonly cacheSalt: string | null;
}
