import { describe, expect, it } from 'vitest';
import { seededRng } from '../../src/common/index.js';
import { resolveMockerOptions } from '../../src/mocker/index.js';
import {
  agenticWorkload,
  AGENTIC_DEFAULTS,
  hitRateBound,
  parsePolicies,
  replayEngineOptions,
  runOffline,
  type AgenticOptions,
  type ReplayRequest,
} from '../../src/replay/index.js';
import { toolPauseMs } from '../../src/replay/agentic.js';

const OPTS: AgenticOptions = { ...AGENTIC_DEFAULTS, seed: 3, traceBlockSize: 512, sessions: 6, medianTurns: 10 };

/** Request a's blocks are a prefix of b's (the last one may be partial in a and continued in b). */
function extends_(a: ReplayRequest, b: ReplayRequest): boolean {
  return a.hashIds.every((id, i) => b.hashIds[i] === id) && b.inputLength > a.inputLength;
}

describe('agentic workload', () => {
  const w = agenticWorkload(OPTS);
  const byIndex = w.requests;

  it('is a pure function of its options', () => {
    expect(agenticWorkload(OPTS)).toEqual(w);
    expect(agenticWorkload({ ...OPTS, seed: 4 }).requests).not.toEqual(w.requests);
  });

  it('orders requests by nominal time, and a closed-loop turn only waits on earlier requests', () => {
    for (let i = 1; i < byIndex.length; i++)
      expect(byIndex[i]!.arrivalMs).toBeGreaterThanOrEqual(byIndex[i - 1]!.arrivalMs);
    const open = byIndex.filter((r) => r.after === undefined);
    expect(open).toHaveLength(OPTS.sessions);
    for (const r of byIndex) for (const d of r.after?.requests ?? []) expect(d).toBeLessThan(r.index);
  });

  it('grows each context append-only from the previous turn, or compacts it past the limit', () => {
    let grown = 0;
    for (const r of byIndex) {
      expect(r.inputLength).toBeLessThanOrEqual(OPTS.contextLimit);
      expect(r.hashIds).toHaveLength(Math.ceil(r.inputLength / 512));
      const deps = r.after?.requests ?? [];
      if (deps.length !== 1) continue;
      const prev = byIndex[deps[0]!]!;
      // A follow-up extends its predecessor; a subagent's first turn shares only the app prefix.
      if (extends_(prev, r)) grown++;
    }
    expect(grown).toBeGreaterThan(byIndex.length / 2);
    const small = agenticWorkload({ ...OPTS, contextLimit: 32_000, medianTurns: 40 });
    const compacted = small.requests.filter((r) => {
      const d = r.after?.requests ?? [];
      return d.length === 1 && r.inputLength < small.requests[d[0]!]!.inputLength;
    });
    expect(compacted.length).toBeGreaterThan(0);
  });

  it('shares each app prefix across sessions and subagents, and parents wait for all their subagents', () => {
    const firstBlocks = new Set(byIndex.map((r) => r.hashIds[0]));
    expect(firstBlocks.size).toBeLessThanOrEqual(OPTS.apps);
    const joins = byIndex.filter((r) => (r.after?.requests.length ?? 0) > 1);
    expect(joins.length).toBeGreaterThan(0);
    const bound = hitRateBound(w.requests, 512, 16);
    expect(bound.tokens).toBeGreaterThan(0.85);
  });

  it('draws tool pauses in the published shape: about 86.5 % under 1 s and 95.1 % under 10 s', () => {
    const rng = seededRng(1);
    const n = 20_000;
    const pauses = Array.from({ length: n }, () => toolPauseMs(rng));
    const under = (ms: number): number => pauses.filter((p) => p < ms).length / n;
    expect(under(1000)).toBeCloseTo(0.865, 1);
    expect(under(10_000)).toBeCloseTo(0.951, 1);
    expect(Math.max(...pauses)).toBeLessThanOrEqual(120_000);
  });

  it('rejects bad options with a stable code', () => {
    expect(() => agenticWorkload({ ...OPTS, sessions: 0 })).toThrow(/sessions must be a positive integer/);
    expect(() => agenticWorkload({ ...OPTS, contextLimit: 1000 })).toThrow(/context limit/);
  });
});

describe('closed loop in offline replay', () => {
  it('sends each turn after the end of the turns it waits on plus its pause, in virtual time', async () => {
    const w = agenticWorkload({ ...OPTS, sessions: 2, medianTurns: 4 });
    const run = await runOffline({
      workload: w,
      policy: parsePolicies(['kv'])[0]!,
      topology: { kind: 'aggregated', workers: 2 },
      engine: resolveMockerOptions(replayEngineOptions({}, 1)),
      seed: 1,
    });
    const outcomes = run.outcomes;
    expect(outcomes.every((o) => o.error === null && o.finishMs !== null)).toBe(true);
    let closed = 0;
    for (const r of w.requests) {
      const o = outcomes[r.index]!;
      if (r.after === undefined) {
        expect(o.arrivalMs).toBe(r.arrivalMs);
        continue;
      }
      closed++;
      const end = Math.max(...r.after.requests.map((d) => outcomes[d]!.finishMs!));
      expect(o.arrivalMs).toBeCloseTo(end + r.after.pauseMs, 6);
    }
    expect(closed).toBeGreaterThan(0);
  });
});

describe('kv-step: the time-unit cost from the engines step profile', () => {
  const workload = agenticWorkload({ ...OPTS, sessions: 4, medianTurns: 6 });
  async function placements(policy: string, perfProfile: string): Promise<(number | null)[]> {
    const run = await runOffline({
      workload,
      policy: parsePolicies([policy])[0]!,
      topology: { kind: 'aggregated', workers: 3 },
      engine: resolveMockerOptions(replayEngineOptions({ perfProfile }, 1)),
      seed: 1,
    });
    expect(run.outcomes.every((o) => o.error === null)).toBe(true);
    return run.outcomes.map((o) => o.workerId);
  }

  it('places requests by its own cost under a measured profile (test/core/step-cost.test.ts pins the cost)', async () => {
    expect(await placements('kv-step', 'h100')).not.toEqual(await placements('kv', 'h100'));
  });
});
