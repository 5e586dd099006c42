/**
 * Reading an engine's KV-cache configuration from its /metrics
 * (`vllm:cache_config_info`), as kvgate does when a worker joins
 * (issue 16, engine introspection on join).
 */
import { describe, expect, it } from 'vitest';
import { parseCacheConfigInfo } from '../../src/discovery/engine-config.js';
import { EngineMetrics } from '../../src/mocker/engine-metrics.js';
import { resolveMockerOptions } from '../../src/mocker/options.js';

const VLLM = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="27306",prefix_caching_hash_algo="sha256"} 1.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3",model_name="m"} 0.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 0.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 0.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 0.0
`;

describe('parseCacheConfigInfo', () => {
  it('reads block size and GPU blocks from a vLLM exposition', () => {
    expect(parseCacheConfigInfo(VLLM)).toEqual({ kind: 'ok', blockSize: 16, numGpuBlocks: 27306 });
  });

  it('a gauge without a usable num_gpu_blocks still gives the block size', () => {
    const text =
      '# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="32",num_gpu_blocks="None"} 1\n';
    expect(parseCacheConfigInfo(text)).toEqual({ kind: 'ok', blockSize: 32, numGpuBlocks: undefined });
  });

  it('no gauge, a bad block_size, or text that is not Prometheus: unreadable with a reason', () => {
    const none = parseCacheConfigInfo('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n');
    expect(none).toMatchObject({ kind: 'unreadable', reason: expect.stringContaining('vllm:cache_config_info') });
    const bad = parseCacheConfigInfo('vllm:cache_config_info{block_size="sixteen"} 1\n');
    expect(bad).toMatchObject({ kind: 'unreadable', reason: expect.stringContaining('block_size') });
    expect(parseCacheConfigInfo('<html>not found</html>').kind).toBe('unreadable');
  });

  it('the mocker exports its real block size and block count', async () => {
    const o = resolveMockerOptions({ blockSize: 32, numGpuBlocks: 777 });
    const m = new EngineMetrics(o, () => []);
    expect(parseCacheConfigInfo(await m.render())).toEqual({ kind: 'ok', blockSize: 32, numGpuBlocks: 777 });
  });
});
