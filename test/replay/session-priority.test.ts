/**
 * The agentic workload's sessions in offline replay. Session-start priority (the gateway's `session_priority`): every
 * leg carries its root session's start as the engine `priority`, and engines in priority scheduling admit by it.
 * Session pins (`session_affinity: pin`): a session's requests stay on its first worker, a subagent's on its parent's.
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
  type Topology,
  type Workload,
} from '../../src/replay/index.js';
import type { RequestOutcome } from '../../src/replay/results.js';
import { sessionStarts } from '../../src/replay/workload.js';

/**
 * 16 sessions starting about 4 a second, of 3 turns at the median (their subagents' 8), with contexts past 100k
 * tokens: 417 requests, whose sessions overlap enough that 2 engines of 12,000 blocks preempt (about 50 times, 43
 * requests admitted out of session order without session priority) and the cost model moves sessions (about 50
 * moves on 4 workers without pins). The file replays it eight times, each about as costly as its prompt tokens
 * (16M): more sessions or turns buy no margin the assertions need.
 */
const SESSIONS = 16;
const workload = agenticWorkload({
  ...AGENTIC_DEFAULTS,
  seed: 5,
  traceBlockSize: 512,
  sessions: SESSIONS,
  sessionRatePerS: 4,
  medianTurns: 3,
});

describe("the workload's sessions", () => {
  it("names each request's session as its client would, a subagent's with its parent", () => {
    const seen = new Set<string>();
    for (const r of workload.requests) {
      expect(r.session).toBeDefined();
      if (r.after === undefined) expect(r.session!.parentId).toBeUndefined(); // a top-level session's first turn
      seen.add(r.session!.id);
      // A subagent's parent session has already been seen (it spawned it).
      if (r.session!.parentId !== undefined) expect(seen.has(r.session!.parentId)).toBe(true);
    }
    expect(workload.requests.some((r) => r.session!.parentId !== undefined)).toBe(true);
  });
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
    expect(new Set(starts).size).toBe(SESSIONS); // one start per top-level session
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

/**
 * Requests sent to another worker than their session's live binding (or, unbound, their parent's), and those kept
 * on it. A binding lives 300 s (virtual) past the session's last routed request: a parent waiting longer on its
 * subagents, or a long pause, starts it afresh.
 */
function bindingMoves(
  run: PolicyRun,
  workerOf: (o: RequestOutcome) => number | null = (o) => o.workerId,
): { moved: number; kept: number; workers: number } {
  const home = new Map<string, { workerId: number; at: number }>();
  const live = (id: string | undefined, at: number) => {
    const b = id === undefined ? undefined : home.get(id);
    return b !== undefined && at < b.at + 300_000 ? b.workerId : undefined;
  };
  let moved = 0;
  let kept = 0;
  const byArrival = [...workload.requests].sort(
    (a, b) => run.outcomes[a.index]!.arrivalMs - run.outcomes[b.index]!.arrivalMs,
  );
  for (const r of byArrival) {
    const o = run.outcomes[r.index]!;
    expect(o.error).toBeNull();
    const s = r.session!;
    const bound = live(s.id, o.arrivalMs) ?? live(s.parentId, o.arrivalMs);
    const worker = workerOf(o)!;
    if (bound !== undefined) {
      if (bound === worker) kept++;
      else moved++;
    }
    home.set(s.id, { workerId: worker, at: o.arrivalMs });
  }
  return { moved, kept, workers: new Set([...home.values()].map((b) => b.workerId)).size };
}

describe('offline replay with session pins', () => {
  const run = (
    policy: string,
    pins: { sessionPins?: boolean; sessionPriority?: boolean },
    topology: Topology = { kind: 'aggregated', workers: 4 },
  ) =>
    runOffline({
      workload,
      policy: parsePolicies([policy])[0]!,
      topology,
      engine: resolveMockerOptions(
        replayEngineOptions({ perfProfile: 'h100', schedulingPolicy: pins.sessionPriority ? 'priority' : 'fcfs' }, 1),
      ),
      seed: 1,
      ...pins,
    });

  it("keeps every session on the worker of its first request, and a subagent on its parent's", async () => {
    const m = bindingMoves(await run('kv', { sessionPins: true }));
    expect(m.kept).toBeGreaterThan(workload.requests.length / 2);
    expect(m.moved).toBe(0);
    expect(m.workers).toBeGreaterThan(1); // first turns are routed
    expect(bindingMoves(await run('kv', {})).moved).toBeGreaterThan(0); // the cost model moves some
  });

  it('pins a session in each pool of a P/D fleet, to the worker that served it there', async () => {
    const pd = { kind: 'disaggregated', prefillWorkers: 2, decodeWorkers: 2, protocol: 'kv_transfer_params' } as const;
    const pinned = await run('kv', { sessionPins: true }, pd);
    for (const pool of [(o: RequestOutcome) => o.prefillWorkerId, (o: RequestOutcome) => o.workerId]) {
      const m = bindingMoves(pinned, pool);
      expect(m.moved).toBe(0);
      expect(m.kept).toBeGreaterThan(workload.requests.length / 2);
      expect(m.workers).toBe(2); // first turns are routed over the pool
    }
    // The cost model alone moves some, in one pool or the other.
    const free = await run('kv', {}, pd);
    const moved = bindingMoves(free, (o) => o.prefillWorkerId).moved + bindingMoves(free, (o) => o.workerId).moved;
    expect(moved).toBeGreaterThan(0);
  });

  it('pins the named sessions of a policy without a cost model, as the gateway does, when they carry priority', async () => {
    expect(bindingMoves(await run('least-loaded', { sessionPriority: true })).moved).toBe(0);
    expect(bindingMoves(await run('least-loaded', {})).moved).toBeGreaterThan(0);
  });
});
