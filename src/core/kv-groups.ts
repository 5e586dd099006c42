/**
 * Hybrid models: the prefix an engine can really reuse when its KV cache is
 * split into groups of different attention kinds (vLLM's hybrid KV-cache
 * manager keeps one KV-cache group per kind, and its KV events say which).
 *
 * A prefix of `e` blocks is reused only when every group can serve it, each by
 * its own rule (vLLM's `find_longest_cache_hit` of each single-type manager,
 * combined by the hybrid coordinator until no group shortens the hit):
 * - full attention (and MLA, sink full attention): every block before `e`;
 * - sliding window of `W` tokens: only the last `ceil((W - 1) / blockSize)`
 *   blocks before `e` (or every block before `e` when `e` is shorter than
 *   that): blocks that slid out of the window may be gone;
 * - Mamba / linear attention: the state saved at `e`, i.e. block `e - 1`;
 * - a kind kvgate does not know (chunked local attention, ...): nothing is
 *   predicted (hit 0), never the full-attention answer.
 *
 * Pure: blocks are asked for through `BlockPresence`, so the rule is the same
 * over the router's indexes and over a simulated engine's cache.
 */
import type { PrefixIndex } from '../wasm/index.js';

/** How a group reuses blocks. */
export type KvGroupKind = 'full' | 'sliding_window' | 'mamba' | 'unknown';

/** One KV-cache group as the engine announces it. */
export interface KvGroupSpec {
  readonly kind: KvGroupKind;
  /** Tokens of the window (sliding_window only). */
  readonly slidingWindow?: number | undefined;
  /** The engine's own name for the kind (`kv_cache_spec_kind`), for logs and /admin. */
  readonly wireKind: string;
}

/**
 * The most KV-cache groups kvgate keeps for one model, its primary included (`kv_events.max_kv_groups` at most):
 * src/events keeps, per block, a 32-bit mask of the groups that hold it, a bit per group in the order the model's
 * groups were first seen. Real hybrid layouts have far fewer (7 for Gemma 3, 8 for Jamba: see src/events).
 */
export const MAX_KV_GROUPS = 32;

export const FULL_ATTENTION_GROUP: KvGroupSpec = Object.freeze({ kind: 'full', wireKind: 'full_attention' });

const FULL_KINDS = new Set(['full_attention', 'mla_attention', 'sink_full_attention']);
const SLIDING_KINDS = new Set(['sliding_window', 'sliding_window_mla']);
const MAMBA_KINDS = new Set(['mamba', 'linear_attention']);

/**
 * A group spec from vLLM's `kv_cache_spec_kind` and `kv_cache_spec_sliding_window`. An absent kind is full
 * attention (engines before the field, single-group models); a sliding window without a usable size is unknown.
 */
export function kvGroupSpecOf(wireKind: string | undefined, slidingWindow: number | undefined): KvGroupSpec {
  if (wireKind === undefined) return FULL_ATTENTION_GROUP;
  const kind = wireKind.toLowerCase();
  if (FULL_KINDS.has(kind)) return kind === 'full_attention' ? FULL_ATTENTION_GROUP : { kind: 'full', wireKind };
  if (MAMBA_KINDS.has(kind)) return { kind: 'mamba', wireKind };
  if (
    SLIDING_KINDS.has(kind) &&
    slidingWindow !== undefined &&
    Number.isSafeInteger(slidingWindow) &&
    slidingWindow > 0
  )
    return { kind: 'sliding_window', slidingWindow, wireKind };
  return { kind: 'unknown', wireKind };
}

/** The short form used by flags, logs and /admin: `full`, `sliding:128`, `mamba`, `unknown(<kind>)`. */
export function kvGroupLabel(spec: KvGroupSpec): string {
  if (spec.kind === 'sliding_window') return `sliding:${spec.slidingWindow}`;
  if (spec.kind === 'unknown') return `unknown(${spec.wireKind})`;
  return spec.kind;
}

/**
 * A group from its short form (`kvGroupLabel`'s, or a vLLM kind name, `kind:<tokens>` for a window):
 * `full`, `sliding:128`, `sliding_window:4096`, `mamba`. Anything else is `unknown`.
 */
export function parseKvGroupLabel(label: string): KvGroupSpec {
  const [name = '', size] = label.trim().split(':', 2);
  const lower = name.toLowerCase();
  const window = size !== undefined && /^\d+$/.test(size) ? Number(size) : undefined;
  if (lower === 'full') return FULL_ATTENTION_GROUP;
  if (lower === 'sliding') return kvGroupSpecOf('sliding_window', window);
  const spec = kvGroupSpecOf(name, window);
  // A known kind with a size it does not take (`mamba:3`) is not a layout kvgate understands.
  return size !== undefined && spec.kind !== 'sliding_window' ? { kind: 'unknown', wireKind: label.trim() } : spec;
}

/** Blocks a sliding window of `window` tokens needs before the hit point (vLLM: cdiv(window - 1, block size)). */
function slidingWindowBlocks(window: number, blockSize: number): number {
  return Math.max(1, Math.ceil((window - 1) / blockSize));
}

/** Whether a group holds block `i` (0-based) of the request. */
export type BlockPresence = (i: number) => boolean;

/**
 * The longest hit, at most `limit` blocks, that one group can serve. `leading` is the group's run of held
 * blocks from block 0 when the caller already knows it (full attention reads nothing else).
 */
function groupHitBlocks(
  spec: KvGroupSpec,
  blockSize: number,
  limit: number,
  held: BlockPresence,
  leading?: number,
): number {
  switch (spec.kind) {
    case 'full': {
      if (leading !== undefined) return Math.min(limit, leading);
      let e = 0;
      while (e < limit && held(e)) e++;
      return e;
    }
    case 'sliding_window': {
      // Scanned from the end, as the engine does: the first run of `need` held blocks ends the hit; a shorter
      // run reaching block 0 is a hit too.
      const need = slidingWindowBlocks(spec.slidingWindow!, blockSize);
      let run = 0;
      for (let i = limit - 1; i >= 0; i--) {
        if (!held(i)) {
          run = 0;
          continue;
        }
        if (++run >= need) return i + run;
      }
      return run;
    }
    case 'mamba':
      for (let e = limit; e > 0; e--) if (held(e - 1)) return e;
      return 0;
    case 'unknown':
      return 0;
  }
}

/**
 * The longest prefix every group can serve: each group shortens the hit in turn until none does (the limit
 * only falls, so this ends after at most one pass per change).
 */
export function hybridHitBlocks(
  groups: readonly { readonly spec: KvGroupSpec; readonly held: BlockPresence; readonly leading?: number }[],
  blockSize: number,
  limit: number,
): number {
  let hit = limit;
  for (let changed = true; changed && hit > 0;) {
    changed = false;
    for (const g of groups) {
      const h = groupHitBlocks(g.spec, blockSize, hit, g.held, g.leading);
      if (h < hit) {
        hit = h;
        changed = true;
      }
    }
  }
  return hit;
}

/** One group of a model's KV cache, with the index of what each worker holds in it. */
export interface KvGroupView {
  readonly groupIdx: number;
  readonly spec: KvGroupSpec;
  readonly index: PrefixIndex;
}

/**
 * A model's KV-cache groups as the router sees them (src/events keeps them from the engines' events).
 * `primary` is the group of the router's own index; `others` is empty for one-group models, whose overlap
 * stays the primary index's leading depth exactly as before.
 */
export interface KvCacheGroups {
  primarySpec(): KvGroupSpec;
  others(): readonly KvGroupView[];
}

/** True when overlap must go through the group rule (more than one group, or a primary that is not full attention). */
export function isHybrid(groups: KvCacheGroups | undefined): groups is KvCacheGroups {
  return groups !== undefined && (groups.others().length > 0 || groups.primarySpec().kind !== 'full');
}
