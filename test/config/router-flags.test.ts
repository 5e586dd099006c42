import { describe, expect, it } from 'vitest';
import { ROUTER_FLAG_FIELDS, kvRouterOptionsFromFlags } from '../../src/config/router-flags.js';
import { KV_ROUTER_DEFAULTS, resolveKvRouterConfig } from '../../src/core/index.js';
import { kvgateErrorOf } from '../helpers/kvgate-error.js';

const configError = kvgateErrorOf;

describe('router flags (Dynamo spellings on the command line)', () => {
  it('every field has a flag entry, and flags parse to options', () => {
    for (const key of Object.keys(KV_ROUTER_DEFAULTS)) expect(ROUTER_FLAG_FIELDS).toHaveProperty(key);
    expect(ROUTER_FLAG_FIELDS.routerTemperature.flag).toBe('--router-temperature');
    expect(ROUTER_FLAG_FIELDS.overlapScoreCredit.flag).toBe('--router-kv-overlap-score-credit');
    const opts = kvRouterOptionsFromFlags({
      '--router-temperature': '0.5',
      '--no-router-kv-events': true,
      '--router-queue-threshold': '4',
      '--router-queue-policy': 'wspt',
      '--router-queue-by-incoming-missing-isl': '[[0, 8192], [4096, 2048]]',
      '--router-predicted-ttl-secs': 'none',
      '--router-track-output-blocks': 'true',
    });
    expect(opts).toEqual({
      routerTemperature: 0.5,
      useKvEvents: false,
      routerQueueThreshold: 4,
      routerQueuePolicy: 'wspt',
      routerQueueByIncomingMissingIsl: [
        [0, 8192],
        [4096, 2048],
      ],
      routerPredictedTtlSecs: null,
      routerTrackOutputBlocks: true,
    });
    expect(resolveKvRouterConfig(opts).routerQueuePolicy).toBe('wspt');
    expect(configError(() => kvRouterOptionsFromFlags({ '--router-temperature': 'hot' })).detail).toMatchObject({
      field: '--router-temperature',
    });
    expect(configError(() => kvRouterOptionsFromFlags({ '--router-bogus': '1' })).detail).toMatchObject({
      reason: 'unknown router flag',
    });
  });
});
