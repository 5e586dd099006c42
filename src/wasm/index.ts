/**
 * The WASM boundary: hashing, the prefix index, the in-flight prompt trie and token-id arrays read from JSON.
 * Nothing else touches WASM memory.
 */
export {
  xxh3,
  blockHashes,
  promptHashes,
  promptHashViews,
  sequenceHashes,
  requestSeed,
  BLOCK_HASH_SEED,
} from './hashing.js';
export type { BlockHashOptions, PromptHashes } from './hashing.js';
export { jsonIdArray } from './id-array.js';
export { PrefixIndex } from './prefix-index.js';
export { ActivePromptTrie } from './active-prompt-trie.js';
export type { TrieNode } from './active-prompt-trie.js';
export { PackedOutcome, PackedRun, PackedStop } from './packed-run.js';
export type { PackedSource } from './packed-run.js';
export { allocationHookPending, failIndexAllocation, takeAllocationHook } from './instance.js';
export type { RemoveResult } from './prefix-index.js';
export { waterLevel } from './memory-pool.js';
export type { EvictionReport } from './memory-pool.js';
export type { OverlapScores } from './index-match.js';
export { ShardedPrefixIndex } from './sharded-index.js';
