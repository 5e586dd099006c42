import { describe, expect, it } from 'vitest';
import { dpRankEndpoint, connectEndpoint } from '../../src/events/index.js';

describe('dpRankEndpoint (vLLM offset_endpoint_port)', () => {
  it('offsets tcp ports by the rank and suffixes inproc endpoints', () => {
    expect(dpRankEndpoint('tcp://10.0.0.5:5557', 0)).toBe('tcp://10.0.0.5:5557');
    expect(dpRankEndpoint('tcp://10.0.0.5:5557', 3)).toBe('tcp://10.0.0.5:5560');
    expect(dpRankEndpoint('tcp://[::1]:5558', 1)).toBe('tcp://[::1]:5559');
    expect(dpRankEndpoint('inproc://kv', 0)).toBe('inproc://kv');
    expect(dpRankEndpoint('inproc://kv', 2)).toBe('inproc://kv_dp2');
  });

  it('takes an ipc:// path as rank 0, which has nothing to offset', () => {
    expect(dpRankEndpoint('ipc:///run/vllm/kv-events', 0)).toBe('ipc:///run/vllm/kv-events');
  });

  it('rejects what it cannot offset with KVG_ERR_INVALID_CONFIG', () => {
    expect(() => dpRankEndpoint('ipc:///tmp/kv', 1)).toThrow(
      expect.objectContaining({ code: 'KVG_ERR_INVALID_CONFIG' }),
    );
    expect(() => dpRankEndpoint('tcp://h:65535', 1)).toThrow(
      expect.objectContaining({ code: 'KVG_ERR_INVALID_CONFIG' }),
    );
    expect(() => dpRankEndpoint('tcp://h:1', -1)).toThrow(expect.objectContaining({ code: 'KVG_ERR_INVALID_CONFIG' }));
  });
});

describe('connectEndpoint', () => {
  it('turns bind wildcards into the engine host', () => {
    expect(connectEndpoint('tcp://*:5557', '10.0.0.5')).toBe('tcp://10.0.0.5:5557');
    expect(connectEndpoint('tcp://0.0.0.0:5557', 'gpu-1')).toBe('tcp://gpu-1:5557');
    expect(connectEndpoint('tcp://[::]:5557', 'fe80::1')).toBe('tcp://[fe80::1]:5557');
    expect(connectEndpoint('tcp://10.0.0.9:5557', 'x')).toBe('tcp://10.0.0.9:5557');
  });
});
