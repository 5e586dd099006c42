import { describe, expect, it } from 'vitest';
import { parsePolicies, runReplay, type ReplayConfig } from '../../src/replay/index.js';
import { predictionFromMetrics, runOnlineReplay } from '../../src/cli/replay-online.js';

const SMALL = new URL('../fixtures/traces/small.jsonl', import.meta.url).pathname;

function config(mode: 'offline' | 'online'): ReplayConfig {
  return {
    trace: SMALL,
    traceBlockSize: 512,
    strict: false,
    workload: { speedup: 4, maxRequests: 48 },
    mode,
    policies: parsePolicies(['kv', 'round-robin']),
    topology: { kind: 'aggregated', workers: 3 },
    engine: {},
    seed: 3,
    jobs: 1,
  };
}

describe('online replay (mocker engines behind the real gateway, over HTTP)', () => {
  it('agrees with offline replay: the same hit rates and their ordering, TTFT no better than virtual time', async () => {
    const offline = (await runReplay(config('offline'), { command: 'offline' })).report.policies;
    const online = (await runReplay(config('online'), { command: 'online', runOnline: runOnlineReplay })).report
      .policies;
    for (const name of ['kv', 'round-robin']) {
      const off = offline[name]!;
      const on = online[name]!;
      expect(on.requests).toEqual({ total: 48, completed: 48, failed: 0 });
      // Engine-reported hits agree within 8 points: online timing reorders a few admissions, and
      // under a full parallel test run on 2 cores we have seen up to 5.5 points on this 48-request slice.
      expect(Math.abs(on.hit_rate - off.hit_rate)).toBeLessThanOrEqual(0.08);
      // Online adds HTTP, the gateway and an event loop shared with the engines: never faster than virtual
      // time, and (loosely: this machine is shared, and a busy loop delays engine steps) not wildly slower.
      expect(on.ttft_ms.mean!).toBeGreaterThan(off.ttft_ms.mean! - 5);
      expect(on.ttft_ms.mean!).toBeLessThan(off.ttft_ms.mean! * 4 + 1000);
    }
    expect(offline.kv!.hit_rate).toBeGreaterThan(offline['round-robin']!.hit_rate);
    expect(online.kv!.hit_rate).toBeGreaterThan(online['round-robin']!.hit_rate);
    // The gateway's router predicted the engines' hits (its own metrics say how often exactly).
    expect(online.kv!.prediction_error!.exact_fraction).toBeGreaterThan(0.9);
    expect(online['round-robin']!.prediction_error).toBeNull();
  }, 60_000);

  it('reads the prediction error from the gateway metrics', () => {
    const text = [
      'kvgate_router_prediction_total{model="m",worker_type="aggregated",outcome="exact"} 8',
      'kvgate_router_prediction_total{model="m",worker_type="aggregated",outcome="under"} 2',
      'kvgate_router_prediction_error_tokens_sum{model="m",worker_type="aggregated"} 32',
      'kvgate_router_prediction_error_tokens_count{model="m",worker_type="aggregated"} 10',
    ].join('\n');
    expect(predictionFromMetrics(text)).toEqual({ requests: 10, exact_fraction: 0.8, mean_signed_tokens: -3.2 });
    expect(predictionFromMetrics('')).toBeNull();
  });
});
