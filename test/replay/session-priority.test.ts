/**
 * Session-start priority in offline replay (the gateway's `session_priority`): every leg carries its root session's
 * start as the engine `priority`, and engines in priority scheduling admit by it.
 */
import { describe, expect, it } from 'vitest';
import { resolveMockerOptions } from '../../src/mocker/index.js';
import {
  agenticWorkload,
  AGENTIC_DEFAULTS,
  parsePolicies,
  replayEngineOptions,
  runOffline,
  type PolicyRun,
  type Workload,
} from '../../src/replay/index.js';
import { sessionStarts } from '../../src/replay/workload.js';

const workload = agenticWorkload({
  ...AGENTIC_DEFAULTS,
  seed: 5,
  traceBlockSize: 512,
  sessions: 12,
  sessionRatePerS: 2,
  medianTurns: 8,
});

describe('sessionStarts', () => {
  it("gives each request its session tree's first request's arrival", () => {
    const starts = sessionStarts(workload.requests);
    let subagentTurns = 0;
    for (const r of workload.requests) {
      if (r.after === undefined) {
        expect(starts[r.index]).toBe(r.arrivalMs);
        continue;
      }
      // Every request it follows belongs to the same tree: a turn, a subagent, a parent resuming after its subagents.
      for (const d of r.after.requests) expect(starts[d]).toBe(starts[r.index]);
      if (r.after.requests.length > 1) subagentTurns++;
    }
    expect(subagentTurns).toBeGreaterThan(0); // the workload has subagents
    expect(new Set(starts).size).toBe(12); // one start per top-level session
  });
});

describe('offline replay with session-start priority', () => {
  const run = (sessionPriority: boolean): Promise<PolicyRun> =>
    runOffline({
      workload,
      policy: parsePolicies(['kv'])[0]!,
      topology: { kind: 'aggregated', workers: 2 },
      engine: resolveMockerOptions(
        replayEngineOptions({ perfProfile: 'h100', schedulingPolicy: 'priority', numGpuBlocks: 12_000 }, 1),
      ),
      seed: 1,
      sessionPriority,
    });

  /**
   * Pairs (y, x) on one engine where y waited through x's first admission although an engine ordering by session
   * start would have admitted y first: y's session is older, or as old and y came first.
   */
  function admittedOutOfSessionOrder(r: PolicyRun, w: Workload): number {
    const starts = sessionStarts(w.requests);
    const done = r.outcomes.filter((o) => o.admittedMs !== null);
    let n = 0;
    for (const x of done)
      for (const y of done) {
        if (y.workerId !== x.workerId || !(y.arrivalMs < x.admittedMs! && y.admittedMs! > x.admittedMs!)) continue;
        const sy = Math.round(starts[y.index]!);
        const sx = Math.round(starts[x.index]!);
        if (sy < sx || (sy === sx && y.arrivalMs < x.arrivalMs)) n++;
      }
    return n;
  }

  it('admits on each engine in session-start order; without it, as requests came', async () => {
    const [on, off] = await Promise.all([run(true), run(false)]);
    for (const r of [on, off]) expect(r.outcomes.every((o) => o.error === null && o.finishMs !== null)).toBe(true);
    expect(off.preemptions).toBeGreaterThan(0); // the engines run short of KV: the order matters
    expect(admittedOutOfSessionOrder(off, workload)).toBeGreaterThan(0);
    expect(admittedOutOfSessionOrder(on, workload)).toBe(0);
  });
});
