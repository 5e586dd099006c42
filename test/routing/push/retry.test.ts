/**
 * retryBeforeFirstByte on its own: an attempt runs again only when it asked
 * for it (`retryElsewhere`, called by a failure that reached no client) and
 * the budget and the client allow; each retry excludes the failed worker in
 * the request's shared set and is counted by reason; with no worker left the
 * caller hears the failure that made it retry.
 */
import { describe, expect, it } from 'vitest';
import { Cancellation } from '../../../src/common/index.js';
import { KvgateError, isKvgateError } from '../../../src/errors/index.js';
import { KvgateMetrics } from '../../../src/metrics/index.js';
import { retryBeforeFirstByte, type RetryPolicy, type RetryScope } from '../../../src/routing/push/retry.js';
import { sampleSum } from '../../helpers/metric-sum.js';
import { rejection } from './push-fixtures.js';

const unreachable = (w: number): KvgateError =>
  new KvgateError('KVG_ERR_ENGINE_UNREACHABLE', `cannot connect to worker ${w}`);

function policy(over: Partial<RetryPolicy> = {}): RetryPolicy & { metrics: KvgateMetrics } {
  return {
    model: 'm',
    maxRetries: 2,
    signal: new Cancellation(),
    metrics: new KvgateMetrics({ processMetrics: false }),
    ...over,
  } as RetryPolicy & { metrics: KvgateMetrics };
}

const retries = async (p: { metrics: KvgateMetrics }, reason?: string): Promise<number> =>
  sampleSum(await p.metrics.text(), 'kvgate_router_retries_total', reason === undefined ? {} : { reason });

/** What each attempt saw: its number and the workers excluded when it started. */
type Seen = { attempt: number; excluded: number[] };

/** Attempts on workers 1, 2, 3, ... that each fail asking for a retry, until `okAt` (if given) succeeds. */
function failingOn(seen: Seen[], okAt?: number) {
  return async (scope: RetryScope): Promise<string> => {
    seen.push({ attempt: scope.attempt, excluded: [...scope.exclude] });
    const w = scope.attempt + 1;
    if (scope.attempt === okAt) return `served by ${w}`;
    scope.retryElsewhere(w, 'KVG_ERR_ENGINE_UNREACHABLE');
    throw unreachable(w);
  };
}

describe('retryBeforeFirstByte', () => {
  it('a first attempt that succeeds runs once, excluding nothing, counting nothing', async () => {
    const p = policy();
    const seen: Seen[] = [];
    expect(await retryBeforeFirstByte(p, failingOn(seen, 0))).toBe('served by 1');
    expect(seen).toEqual([{ attempt: 0, excluded: [] }]);
    expect(await retries(p)).toBe(0);
  });

  it('a failure that asks for it runs again with the failed worker excluded, counted by reason', async () => {
    const p = policy();
    const seen: Seen[] = [];
    expect(await retryBeforeFirstByte(p, failingOn(seen, 2))).toBe('served by 3');
    expect(seen).toEqual([
      { attempt: 0, excluded: [] },
      { attempt: 1, excluded: [1] },
      { attempt: 2, excluded: [1, 2] },
    ]);
    expect(await retries(p, 'KVG_ERR_ENGINE_UNREACHABLE')).toBe(2);
  });

  it('at most maxRetries retries: the budget refuses the next and the last failure is thrown', async () => {
    const p = policy({ maxRetries: 2 });
    const seen: Seen[] = [];
    const answers: boolean[] = [];
    const err = await rejection(
      retryBeforeFirstByte(p, async (scope) => {
        seen.push({ attempt: scope.attempt, excluded: [...scope.exclude] });
        answers.push(scope.retryElsewhere(scope.attempt + 1, 'engine_503'));
        throw unreachable(scope.attempt + 1);
      }),
    );
    expect(answers).toEqual([true, true, false]);
    expect((err as KvgateError).message).toBe('cannot connect to worker 3');
    expect(seen).toHaveLength(3);
    expect(await retries(p, 'engine_503')).toBe(2);
  });

  it('maxRetries 0: never retried', async () => {
    const p = policy({ maxRetries: 0 });
    const seen: Seen[] = [];
    expect(isKvgateError(await rejection(retryBeforeFirstByte(p, failingOn(seen))), 'KVG_ERR_ENGINE_UNREACHABLE')).toBe(
      true,
    );
    expect(seen).toHaveLength(1);
    expect(await retries(p)).toBe(0);
  });

  it('a failure that does not ask for a retry is thrown as is, whatever the budget', async () => {
    const p = policy({ maxRetries: 5 });
    let attempts = 0;
    const refused = new KvgateError('KVG_ERR_ENGINE_REJECTED', 'the engine refused');
    const err = await rejection(
      retryBeforeFirstByte(p, async () => {
        attempts++;
        throw refused;
      }),
    );
    expect(err).toBe(refused);
    expect(attempts).toBe(1);
    expect(await retries(p)).toBe(0);
  });

  it('once the client left nothing is retried: retryElsewhere answers false', async () => {
    const signal = new Cancellation();
    const p = policy({ signal, maxRetries: 5 });
    const answers: boolean[] = [];
    const err = await rejection(
      retryBeforeFirstByte(p, async (scope) => {
        if (scope.attempt === 1) signal.abort(new Error('gone'));
        answers.push(scope.retryElsewhere(scope.attempt + 1, 'KVG_ERR_ENGINE_UNREACHABLE'));
        throw unreachable(scope.attempt + 1);
      }),
    );
    expect(answers).toEqual([true, false]);
    expect((err as KvgateError).message).toBe('cannot connect to worker 2');
    expect(await retries(p)).toBe(1);
  });

  it('no worker left on a retry: the failure that made it retry is thrown, not the empty pool', async () => {
    const p = policy({ maxRetries: 5 });
    const err = await rejection(
      retryBeforeFirstByte(p, async (scope) => {
        if (scope.attempt === 2) throw new KvgateError('KVG_ERR_NO_WORKERS', 'no eligible worker');
        scope.retryElsewhere(scope.attempt + 1, 'KVG_ERR_ENGINE_UNREACHABLE');
        throw unreachable(scope.attempt + 1);
      }),
    );
    expect((err as KvgateError).message).toBe('cannot connect to worker 2');
  });

  it('no worker on the first attempt: NO_WORKERS itself', async () => {
    const p = policy();
    const err = await rejection(
      retryBeforeFirstByte(p, async () => {
        throw new KvgateError('KVG_ERR_NO_WORKERS', 'no eligible worker');
      }),
    );
    expect(isKvgateError(err, 'KVG_ERR_NO_WORKERS')).toBe(true);
  });

  it('the exclusion set is the request one: a given set gains the failed workers (shared with migrations)', async () => {
    const shared = new Set([7]);
    const p = policy({ exclude: shared });
    const seen: Seen[] = [];
    await retryBeforeFirstByte(p, failingOn(seen, 1));
    expect(seen).toEqual([
      { attempt: 0, excluded: [7] },
      { attempt: 1, excluded: [7, 1] },
    ]);
    expect([...shared]).toEqual([7, 1]);
  });

  it('without metrics a retry still happens', async () => {
    const seen: Seen[] = [];
    const p = { model: 'm', maxRetries: 1, signal: new Cancellation(), metrics: undefined };
    expect(await retryBeforeFirstByte(p, failingOn(seen, 1))).toBe('served by 2');
    expect(seen).toHaveLength(2);
  });
});
