/**
 * kvgate's vocabulary: each concept that crosses layers has one name, one
 * shape and, where it carries a rule, one validator, declared here once.
 * Every layer may import this folder; it imports only `errors`.
 */
import { KvgateError } from '../errors/index.js';

/** Which side of a deployment a worker (or a request leg) serves. */
export type WorkerRole = 'aggregated' | 'prefill' | 'decode';
export const WORKER_ROLES: readonly WorkerRole[] = ['aggregated', 'prefill', 'decode'];

/** One schedulable unit: a worker and one of its data-parallel ranks. */
export interface WorkerRank {
  readonly workerId: number;
  readonly dpRank: number;
}

/** A pin as a client gives it: a worker, and a rank only if one was named. */
export interface WorkerPin {
  readonly workerId: number;
  readonly dpRank: number | undefined;
}

/**
 * The string key of a (worker, dp rank) pair, for maps keyed by slot outside the hot path.
 * @rank-numbers the prefix index (src/wasm) keys its slots from the numbers it is called with; a caller holding a
 *   `WorkerRank` passes its members.
 */
export function slotKey(workerId: number, dpRank: number): string {
  return `${workerId}:${dpRank}`;
}

/** How a model's router picks a worker. `kv` is KV-cache-aware; `direct` serves only pinned requests. */
export type RouterMode = 'kv' | 'round-robin' | 'random' | 'power-of-two' | 'least-loaded' | 'direct';
export const ROUTER_MODES: readonly RouterMode[] = [
  'kv',
  'round-robin',
  'random',
  'power-of-two',
  'least-loaded',
  'direct',
];
/** The modes that pick by a rule over load alone (no KV index). */
export type SimpleRouterMode = Exclude<RouterMode, 'kv' | 'direct'>;

/** The engine families whose wire formats kvgate speaks (P/D fields, KV events, dp ranks). */
export type EngineDialect = 'vllm' | 'sglang';
export const ENGINE_DIALECTS: readonly EngineDialect[] = ['vllm', 'sglang'];

/** Tokens per KV block, validated once by `blockSize()`; a plain number elsewhere is not a block size. */
export type BlockSize = number & { readonly __brand: 'BlockSize' };
/** The largest block size kvgate accepts (engines use 16 to 256). */
export const MAX_BLOCK_SIZE = 1 << 20;

/**
 * Validates a block size.
 * @throws KvgateError KVG_ERR_INVALID_BLOCK_SIZE unless an integer in [1, 2^20].
 */
export function blockSize(value: unknown): BlockSize {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_BLOCK_SIZE) {
    throw new KvgateError(
      'KVG_ERR_INVALID_BLOCK_SIZE',
      `block size must be an integer in [1, ${MAX_BLOCK_SIZE}], got ${String(value)}`,
      { blockSize: value },
    );
  }
  return value as BlockSize;
}
