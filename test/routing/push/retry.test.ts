/** The retry helper's policy on its own: which failures, how many times, excluding tried workers, the signal. */
import { describe, expect, it } from 'vitest';
import { Cancellation } from '../../../src/common/index.js';
import { KvgateError } from '../../../src/errors/index.js';
import { KvgateMetrics } from '../../../src/metrics/index.js';
import { retryBeforeFirstByte, type RetryScope } from '../../../src/routing/push/retry.js';

function policy(maxRetries: number, cancel = new Cancellation(), exclude?: Set<number>) {
  const metrics = new KvgateMetrics({ processMetrics: false });
  return { metrics, cancel, p: { model: 'm', maxRetries, signal: cancel.signal, metrics, exclude } };
}

const failure = (code: 'KVG_ERR_ENGINE_UNREACHABLE' | 'KVG_ERR_NO_WORKERS' = 'KVG_ERR_ENGINE_UNREACHABLE') =>
  new KvgateError(code, code);

async function retriesBy(metrics: KvgateMetrics): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const v of (await metrics.retries.get()).values) out[String(v.labels.reason)] = v.value;
  return out;
}

describe('retryBeforeFirstByte', () => {
  it('an attempt that asks to retry runs again with the failed worker excluded, counted by reason', async () => {
    const { metrics, p } = policy(2);
    const seen: { attempt: number; exclude: number[] }[] = [];
    const out = await retryBeforeFirstByte(p, async (scope: RetryScope) => {
      seen.push({ attempt: scope.attempt, exclude: [...scope.exclude] });
      if (scope.attempt < 2) {
        scope.retryElsewhere(10 + scope.attempt, 'KVG_ERR_ENGINE_UNREACHABLE');
        throw failure();
      }
      return 'ok';
    });
    expect(out).toBe('ok');
    expect(seen).toEqual([
      { attempt: 0, exclude: [] },
      { attempt: 1, exclude: [10] },
      { attempt: 2, exclude: [10, 11] },
    ]);
    expect(await retriesBy(metrics)).toEqual({ KVG_ERR_ENGINE_UNREACHABLE: 2 });
  });

  it('the budget bounds the attempts: retryElsewhere says false on the last one, and its error is thrown', async () => {
    const { metrics, p } = policy(1);
    const answers: boolean[] = [];
    let attempts = 0;
    const err = await retryBeforeFirstByte(p, async (scope) => {
      attempts++;
      answers.push(scope.retryElsewhere(scope.attempt, 'engine_503'));
      throw failure();
    }).catch((e: unknown) => e);
    expect(attempts).toBe(2);
    expect(answers).toEqual([true, false]);
    expect((err as KvgateError).code).toBe('KVG_ERR_ENGINE_UNREACHABLE');
    expect(await retriesBy(metrics)).toEqual({ engine_503: 1 });
  });

  it('a failure that does not ask for a retry is thrown at once', async () => {
    const { p } = policy(5);
    let attempts = 0;
    const err = await retryBeforeFirstByte(p, async () => {
      attempts++;
      throw new KvgateError('KVG_ERR_INVALID_REQUEST', 'bad');
    }).catch((e: unknown) => e);
    expect(attempts).toBe(1);
    expect((err as KvgateError).code).toBe('KVG_ERR_INVALID_REQUEST');
  });

  it('nothing is retried once the client went away', async () => {
    const { p, cancel } = policy(3);
    let attempts = 0;
    const err = await retryBeforeFirstByte(p, async (scope) => {
      attempts++;
      cancel.abort(new Error('client left'));
      expect(scope.retryElsewhere(1, 'KVG_ERR_ENGINE_UNREACHABLE')).toBe(false);
      throw failure();
    }).catch((e: unknown) => e);
    expect(attempts).toBe(1);
    expect((err as KvgateError).code).toBe('KVG_ERR_ENGINE_UNREACHABLE');
  });

  it('no worker left after a retry: the client hears the failure that made us retry', async () => {
    const { p } = policy(3);
    const first = failure();
    const err = await retryBeforeFirstByte(p, async (scope) => {
      if (scope.attempt === 0) {
        scope.retryElsewhere(1, 'KVG_ERR_ENGINE_UNREACHABLE');
        throw first;
      }
      throw failure('KVG_ERR_NO_WORKERS');
    }).catch((e: unknown) => e);
    expect(err).toBe(first);
  });

  it('a shared exclusion set carries the failed workers to the caller (a migration of the same request)', async () => {
    const shared = new Set<number>([7]);
    const { p } = policy(2, new Cancellation(), shared);
    await retryBeforeFirstByte(p, async (scope) => {
      if (scope.attempt === 0) {
        expect([...scope.exclude]).toEqual([7]);
        scope.retryElsewhere(3, 'KVG_ERR_ENGINE_UNREACHABLE');
        throw failure();
      }
      return undefined;
    });
    expect([...shared].sort()).toEqual([3, 7]);
  });
});
