/** Option defaults and validation: one place, errors naming field, value and reason. */
import { describe, expect, it } from 'vitest';
import {
  MOCKER_DEFAULTS,
  resolveMockerOptions,
  createVirtualEngine,
  createEngineCore,
} from '../../src/mocker/index.js';
import { isKvgateError } from '../../src/errors/index.js';

describe('mocker options', () => {
  it('defaults follow the issue (vLLM defaults, polynomial timing)', () => {
    const o = resolveMockerOptions();
    expect(o).toMatchObject({
      numGpuBlocks: 16384,
      blockSize: 16,
      maxNumBatchedTokens: 8192,
      maxNumSeqs: 256,
      speedup: 1,
      dpSize: 1,
      mode: 'aggregated',
      engine: 'vllm',
      kvEventsEncoding: 'map',
      kvBytesPerToken: 131072,
      kvTransferBandwidthGBps: 64,
      bootstrapTimeoutMs: 30000,
    });
    expect(o.timing.label).toBe('polynomial');
    expect(typeof o.engineHashSeed).toBe('bigint');
    expect(resolveMockerOptions().engineHashSeed).not.toBe(o.engineHashSeed); // random per start, like vLLM's NONE_HASH
    expect(Object.isFrozen(o)).toBe(true);
    expect(MOCKER_DEFAULTS.port).toBe(0);
  });

  it('takes kv bytes per token from the profile', () => {
    expect(resolveMockerOptions({ perfProfile: 'h200' })).toMatchObject({ kvBytesPerToken: 131072 });
    expect(resolveMockerOptions({ perfProfile: 'h200' }).timing.label).toBe('profile:h200-llama3.1-8b');
  });

  it('rejects bad values naming the field, value and reason', () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ numGpuBlocks: 0 }, /numGpuBlocks=0: must be a positive integer/],
      [{ blockSize: 1.5 }, /blockSize=1.5/],
      [{ port: 70000 }, /port=70000: must be a port number/],
      [{ speedup: 0 }, /speedup=0/],
      [{ engine: 'trt' }, /engine=trt: must be vllm or sglang/],
      [{ evictionPolicy: 'mru' }, /evictionPolicy=mru: must be lru or priority/],
      [{ kvEventsEncoding: 'json' }, /kvEventsEncoding=json/],
      [{ kvEventsPort: 65535, dpSize: 2 }, /rank ports run past 65535/],
      [{ loraNames: ['mock-model'] }, /loraNames/],
      [{ perfProfile: '/no/such/file.json' }, /perf profile/],
    ];
    for (const [input, message] of cases) {
      let err: unknown;
      try {
        resolveMockerOptions(input as never);
      } catch (e) {
        err = e;
      }
      expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
      expect((err as Error).message).toMatch(message);
    }
  });

  it('createEngineCore / createVirtualEngine use the same defaults', () => {
    expect(createEngineCore({ blockSize: 32 }).options.blockSize).toBe(32);
    const ve = createVirtualEngine({ engineHashSeed: 5n });
    ve.submit({ id: 'a', promptTokens: [1, 2, 3], maxTokens: 2, seed: 1 });
    expect(ve.runUntilIdle()).toBeGreaterThan(0);
    expect(ve.record('a')!.outputTokens).toBe(2);
  });
});
