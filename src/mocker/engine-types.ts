/**
 * The engine core's data: its options, the requests it takes, what one step
 * returns, its stats and KV events in engine terms. Shared by the core, its
 * drivers (RealtimeEngine, VirtualEngine), the KV-event publisher and replay.
 */
import type { KvGroupSpec } from '../core/index.js';
import type { TimingModel } from './timing.js';

/** A KV event in engine terms; the publisher encodes it for the wire. */
export type KvEvent =
  | {
      type: 'stored';
      /** Engine hashes (uint64) of the stored full blocks, oldest first. */
      blockHashes: bigint[];
      /** Engine hash of the block before the first one; null at the root. */
      parentBlockHash: bigint | null;
      /** Tokens of all stored blocks, blockSize per block. */
      tokenIds: number[];
      blockSize: number;
      loraName: string | null;
      cacheSalt: string | null;
      /** A hybrid engine's KV-cache group (absent: group 0, full attention) and its spec as vLLM names it. */
      groupIdx?: number;
      specKind?: string;
      slidingWindow?: number | null;
    }
  | { type: 'removed'; blockHashes: bigint[]; groupIdx?: number }
  | { type: 'cleared' };

export interface EngineCoreOptions {
  numGpuBlocks: number;
  /** A hybrid engine's KV-cache groups (group 0 full attention, the block pool); absent: one full-attention group. */
  kvGroups?: readonly KvGroupSpec[] | undefined;
  blockSize: number;
  maxNumBatchedTokens: number;
  maxNumSeqs: number;
  /** Timing-model milliseconds are divided by this. */
  speedup: number;
  timing: TimingModel;
  /** Seed of the opaque engine block hashes (uint64). */
  engineHashSeed: bigint;
  /** Token ids generation draws from, uniformly. */
  sampleTokenIds: Uint32Array;
  /** KV bytes per token, for transfer delays. */
  kvBytesPerToken: number;
  /** KV transfer bandwidth in bytes per second. */
  kvTransferBandwidth: number;
  /**
   * vLLM's `--scheduling-policy` (default `fcfs`). `priority`: waiting requests are admitted by their
   * `priority` (lowest first), then arrival; when the cache is short, the running request of the highest
   * `priority` value, the latest to arrive among equals, is preempted instead of the last one admitted.
   */
  schedulingPolicy?: SchedulingPolicy | undefined;
  /**
   * Which cached block a full cache evicts (default `lru`, vLLM's: the least recently released). `priority`
   * (SGLang's `--radix-eviction-policy priority`): the least important, the least recently released among equals,
   * where a block's importance is the lowest `priority` of the requests that used it since it was cached.
   */
  evictionPolicy?: EvictionPolicy | undefined;
}

export const SCHEDULING_POLICIES = ['fcfs', 'priority'] as const;
export type SchedulingPolicy = (typeof SCHEDULING_POLICIES)[number];
export const EVICTION_POLICIES = ['lru', 'priority'] as const;
export type EvictionPolicy = (typeof EVICTION_POLICIES)[number];

export interface CoreRequest {
  id: string;
  promptTokens: readonly number[] | Uint32Array;
  /** Exactly this many tokens are generated (the simulated model never stops early). */
  maxTokens: number;
  /** Seed of this request's generated tokens. */
  seed: number;
  loraName?: string | undefined;
  cacheSalt?: string | undefined;
  /** The prompt's KV arrives from a prefill engine instead of being computed. */
  remotePrefill?: boolean | undefined;
  /** Keep the blocks this long after finishing, for a remote decode to pull. */
  holdBlocksMs?: number | undefined;
  /** vLLM's request `priority` (an integer; lower is served first); read only under the `priority` policy. Default 0. */
  priority?: number | undefined;
}

export interface TokenOutput {
  requestId: string;
  tokenId: number;
  /** 0-based position among the request's generated tokens. */
  index: number;
}

export interface AdmittedRequest {
  requestId: string;
  /** Prompt tokens served from the prefix cache at first admission. */
  cachedTokens: number;
  /** Time from add to first admission, ms. */
  queuedMs: number;
}

export interface FinishedRequest {
  requestId: string;
  reason: 'length';
  promptTokens: number;
  outputTokens: number;
  cachedTokens: number;
  /** Block ids kept for a remote decode (holdBlocksMs), else undefined. */
  heldBlockIds: number[] | undefined;
}

export interface StepResult {
  startedAt: number;
  /** Wall or virtual ms this step takes (timing model / speedup); 0 when nothing was scheduled. */
  durationMs: number;
  /** The timing model left its measured range for this step. */
  extrapolated: boolean;
  scheduledTokens: number;
  prefillTokens: number;
  decodeSequences: number;
  outputs: TokenOutput[];
  admitted: AdmittedRequest[];
  finished: FinishedRequest[];
  preempted: string[];
  kvEvents: KvEvent[];
}

export interface EngineCoreStats {
  running: number;
  waiting: number;
  /** Requests waiting for their remote prefill's KV transfer. */
  transferring: number;
  kvUsage: number;
  activeBlocks: number;
  cachedBlocks: number;
  freeBlocks: number;
  heldRequests: number;
  prefixQueriedTokens: number;
  prefixHitTokens: number;
  preemptions: number;
  promptTokens: number;
  generationTokens: number;
  steps: number;
  extrapolatedSteps: number;
  busyMs: number;
}

/** What `EngineCore.pullHeld` answers: the prompt tokens handed over, or why not. */
export type PullResult = { ok: true; numTokens: number } | { ok: false; reason: string };
