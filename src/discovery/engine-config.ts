/**
 * What an engine says about its KV cache: the `vllm:cache_config_info` info
 * gauge of its Prometheus `/metrics` (vLLM, SGLang's vLLM-compatible metrics,
 * and kvgate's mocker), whose labels carry the block size and the number of
 * GPU blocks per engine (one data-parallel rank):
 *
 *   vllm:cache_config_info{block_size="16",num_gpu_blocks="2048",...} 1
 *
 * kvgate reads it when a worker joins, to fill the worker's capacity for the
 * busy thresholds and to check its block size against the model's, and the
 * KV-cache layout it states: kvgate's mocker names its groups
 * (`kv_cache_groups="full,sliding:128"`); vLLM states a `sliding_window` (tokens)
 * and, for chunked local attention, an `attention_chunk_size`. An engine
 * without the gauge (or without /metrics) is `unreadable`: nothing is known,
 * nothing is flagged.
 */
import { createRequire } from 'node:module';
import { engineGet } from './engine-models.js';
import type { WorkerInfo } from './registry.js';

/** One metric family as parse-prometheus-text-format returns it (only what is read here). */
interface MetricFamily {
  readonly name: string;
  readonly metrics: readonly { readonly labels?: Readonly<Record<string, string>> }[];
}

// The parser ships CommonJS without types: its one function, typed here.
const require = createRequire(import.meta.url);
const parsePrometheusText = require('parse-prometheus-text-format') as (text: string) => MetricFamily[];

/** The info gauge whose labels describe the engine's KV cache. */
const CACHE_CONFIG_METRIC = 'vllm:cache_config_info';

/** The outcome of reading one engine's cache configuration. */
export type EngineCacheConfig =
  /** Tokens per KV block, and KV blocks per engine (undefined when the gauge does not say). */
  | {
      readonly kind: 'ok';
      readonly blockSize: number;
      readonly numGpuBlocks: number | undefined;
      /** The KV-cache groups the engine states, as labels (`full`, `sliding:128`, ...); absent: it states none. */
      readonly kvGroups?: readonly string[];
    }
  /** No usable answer (no /metrics, no gauge, a timeout): nothing is known. */
  | { readonly kind: 'unreadable'; readonly reason: string };

const positiveInt = (v: string | undefined): number | undefined => {
  if (v === undefined || !/^\d+$/.test(v.trim())) return undefined;
  const n = Number(v);
  return Number.isSafeInteger(n) && n > 0 ? n : undefined;
};

/** The cache configuration in a Prometheus text exposition. Never throws. */
export function parseCacheConfigInfo(text: string): EngineCacheConfig {
  let families: MetricFamily[];
  try {
    families = parsePrometheusText(text);
  } catch (err) {
    return { kind: 'unreadable', reason: `/metrics is not Prometheus text: ${(err as Error).message}` };
  }
  const labels = families.find((f) => f.name === CACHE_CONFIG_METRIC)?.metrics[0]?.labels;
  if (labels === undefined) return { kind: 'unreadable', reason: `/metrics has no ${CACHE_CONFIG_METRIC}` };
  const blockSize = positiveInt(labels.block_size);
  if (blockSize === undefined)
    return {
      kind: 'unreadable',
      reason: `${CACHE_CONFIG_METRIC} has no valid block_size label (${JSON.stringify(labels.block_size)})`,
    };
  const kvGroups = kvGroupsOf(labels);
  return {
    kind: 'ok',
    blockSize,
    numGpuBlocks: positiveInt(labels.num_gpu_blocks),
    ...(kvGroups.length > 0 ? { kvGroups } : {}),
  };
}

/** The group layout the labels state: the mocker's list, else what vLLM's cache config says of windows and chunks. */
function kvGroupsOf(labels: Readonly<Record<string, string>>): readonly string[] {
  const declared = labels.kv_cache_groups?.trim();
  if (declared) return declared.split(',').map((g) => g.trim());
  const out: string[] = [];
  const window = positiveInt(labels.sliding_window);
  if (window !== undefined) out.push(`sliding:${window}`);
  const chunk = positiveInt(labels.attention_chunk_size);
  if (chunk !== undefined) out.push(`chunked_local_attention:${chunk}`);
  return out;
}

/** Reads the engine's `GET /metrics` within `timeoutMs` and parses its cache configuration. Never throws. */
export async function readEngineCacheConfig(w: WorkerInfo, timeoutMs: number): Promise<EngineCacheConfig> {
  const got = await engineGet(w.url, '/metrics', timeoutMs, (b) => b.text());
  return got.ok ? parseCacheConfigInfo(got.body) : { kind: 'unreadable', reason: got.reason };
}
