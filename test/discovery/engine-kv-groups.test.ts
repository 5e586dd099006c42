/**
 * The KV-cache layout an engine states in its cache config gauge: kvgate's mocker names its groups, vLLM
 * states a sliding window and a chunk size for chunked local attention; an engine stating none has no layout.
 */
import { describe, expect, it } from 'vitest';
import { parseCacheConfigInfo } from '../../src/discovery/engine-config.js';

const gauge = (labels: string): string => `vllm:cache_config_info{block_size="16",${labels}} 1.0\n`;

describe('the KV-cache layout in vllm:cache_config_info', () => {
  it('reads the groups the mocker names, in order', () => {
    expect(parseCacheConfigInfo(gauge('kv_cache_groups="full,sliding:128"'))).toMatchObject({
      kind: 'ok',
      kvGroups: ['full', 'sliding:128'],
    });
  });

  it("reads vLLM's sliding window and chunked attention, and nothing from an unset window", () => {
    expect(parseCacheConfigInfo(gauge('sliding_window="4096"'))).toMatchObject({ kvGroups: ['sliding:4096'] });
    expect(parseCacheConfigInfo(gauge('attention_chunk_size="8192"'))).toMatchObject({
      kvGroups: ['chunked_local_attention:8192'],
    });
    const plain = parseCacheConfigInfo(gauge('sliding_window="None"'));
    expect(plain.kind === 'ok' && plain.kvGroups).toBe(undefined);
  });
});
