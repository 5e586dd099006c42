import { describe, expect, expectTypeOf, it } from 'vitest';
import * as kvgate from '../../src/index.js';
import type {
  KvRouteRequest,
  RoutingDecision,
  ScheduleOutcome,
  KvRouterConfig,
  RouterConfigOverride,
} from '../../src/index.js';

describe('the library face (src/index.ts)', () => {
  it('exports the router, the scheduler pieces, hashing, the index and the errors', () => {
    for (const name of [
      'KvRouter',
      'KvScheduler',
      'ActiveSequences',
      'ApproximateIndex',
      'PrefixIndex',
      'promptHashes',
      'KvgateError',
      'resolveKvRouterConfig',
      'KV_ROUTER_DEFAULTS',
      'KV_ROUTER_CONFIG_FIELDS',
      'parseRouterConfigOverride',
      'rejectionError',
      'outputBlockDecay',
      'ManualClock',
      'seededRng',
      'RoutingDecision',
      'resolvePin',
    ]) {
      expect(kvgate).toHaveProperty(name);
    }
    const router = new kvgate.KvRouter({ blockSize: 4, clock: new kvgate.ManualClock(), rng: kvgate.seededRng(1) });
    router.addWorker(1);
    expect(router.findBestMatch({ requestId: 'a', tokens: [1, 2, 3, 4, 5] }).workerId).toBe(1);
  });

  it('types', () => {
    expectTypeOf<KvRouteRequest['requestId']>().toEqualTypeOf<string>();
    expectTypeOf<kvgate.KvRouter['findBestMatch']>().returns.toEqualTypeOf<RoutingDecision>();
    expectTypeOf<kvgate.KvRouter['schedule']>().returns.toEqualTypeOf<ScheduleOutcome>();
    expectTypeOf<ScheduleOutcome['status']>().toEqualTypeOf<'routed' | 'queued' | 'rejected'>();
    expectTypeOf<KvRouterConfig['routerTemperature']>().toEqualTypeOf<number>();
    expectTypeOf<KvRouterConfig['routerQueueThreshold']>().toEqualTypeOf<number | null>();
    expectTypeOf<RouterConfigOverride>().toHaveProperty('routerTemperature');
    expectTypeOf(kvgate.resolveKvRouterConfig).returns.toEqualTypeOf<KvRouterConfig>();
  });
});
