/**
 * The `preprocess` section: the preprocessing threads (chat template, tokenizer, block hashes), their caches'
 * bounds per thread, and how long one task may run on a thread before the thread is replaced.
 */
import { defaultPreprocessThreads, GATEWAY_DEFAULTS } from './defaults.js';
import type { ConfigReader } from './reader.js';
import type { GatewayConfig } from './types.js';

/** `processes` gateway processes share the machine: the default thread count divides the cores among them. */
export function readPreprocess(root: ConfigReader, processes: number): GatewayConfig['preprocess'] {
  const D = GATEWAY_DEFAULTS;
  const pre = root.child('preprocess');
  pre?.allowOnly([
    'threads',
    'segment_cache_tokens',
    'segment_cache_bytes',
    'conversation_cache_bytes',
    'task_timeout_ms',
  ]);
  const threads = defaultPreprocessThreads(processes);
  return {
    threads: pre?.int('threads', threads, { min: 0, max: 64 }) ?? threads,
    segmentCacheTokens:
      pre?.int('segment_cache_tokens', D.segmentCacheTokens, { min: 0, max: 1 << 28 }) ?? D.segmentCacheTokens,
    segmentCacheBytes:
      pre?.int('segment_cache_bytes', D.segmentCacheBytes, { min: 0, max: 2 ** 40 }) ?? D.segmentCacheBytes,
    conversationCacheBytes:
      pre?.int('conversation_cache_bytes', D.conversationCacheBytes, { min: 0, max: 2 ** 40 }) ??
      D.conversationCacheBytes,
    taskTimeoutMs:
      pre?.int('task_timeout_ms', D.preprocessTaskTimeoutMs, { min: 100, max: 3_600_000 }) ?? D.preprocessTaskTimeoutMs,
  };
}
