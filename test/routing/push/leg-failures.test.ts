/**
 * What a failed leg tells outlier detection and the timeouts metric: a deadline the engine missed counts against
 * the worker; one that expired while the leg waited for one of kvgate's connections to the worker (every one busy)
 * does not, and is counted apart (kind connection_wait), since the engine never saw the request.
 */
import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { KvgateError } from '../../../src/errors/index.js';
import { KvgateMetrics } from '../../../src/metrics/index.js';
import { makeRouterContext } from '../../../src/routing/index.js';
import { noteLegFailure, reportOutcome, type FailedLeg } from '../../../src/routing/push/leg-failures.js';
import { sampleSum } from '../../helpers/metric-sum.js';

const timeout = (phase: string): KvgateError =>
  new KvgateError('KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT', 'no output', {
    worker: 'http://w',
    path: '/v1/completions',
    timeoutMs: 100,
    migratable: true,
    phase,
  });

describe('a leg cut by its first-byte deadline', () => {
  it('counts against the worker when the engine had it, not when it waited for a connection', () => {
    const reports: [number, string | undefined][] = [];
    const report = (id: number, error: string | undefined): void => void reports.push([id, error]);
    reportOutcome(report, 1, timeout('sent'));
    reportOutcome(report, 2, timeout('queued'));
    expect(reports).toEqual([[1, 'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT']]);
  });

  it('is counted as connection_wait when it never left the queue for a connection', async () => {
    const metrics = new KvgateMetrics({ processMetrics: false });
    const ctx = makeRouterContext({ metrics, logger: pino({ level: 'silent' }) });
    const leg = {
      ctx,
      model: 'm',
      role: 'aggregated',
      req: { requestId: 'r1' },
      sel: { slot: { workerId: 1, dpRank: 0 } },
    } as unknown as FailedLeg;
    noteLegFailure(leg, timeout('sent'));
    noteLegFailure(leg, timeout('queued'));
    const text = await metrics.text();
    expect(sampleSum(text, 'kvgate_router_engine_timeouts_total', { kind: 'first_byte' })).toBe(1);
    expect(sampleSum(text, 'kvgate_router_engine_timeouts_total', { kind: 'connection_wait' })).toBe(1);
  });
});
