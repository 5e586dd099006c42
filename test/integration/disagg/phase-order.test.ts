/**
 * Issue 5, point 5: the phase permit with a deliberately slow prefill
 * dispatch (the prefill worker's dispatch is held at a gate before it reaches
 * a socket). Decode never starts before the prefill's routing is recorded in
 * the tracker's prefill slot; in the bootstrap path it starts as soon as the
 * prefill engine has the request, never waiting for prefill output (SGLang's
 * prefill only answers once decode has connected).
 */
import { afterEach, expect, it } from 'vitest';
import { seededRng, systemClock } from '../../../src/common/index.js';
import { RequestTracker } from '../../../src/core/index.js';
import type { PreparedRequest } from '../../../src/frontend/router-port.js';
import type { LegRequest } from '../../../src/routing/index.js';
import {
  PREFILL_ID,
  booked,
  drain,
  legsOf,
  prepare,
  randomTokens,
  startDisaggFleet,
  until,
  type DisaggFleet,
  type SentLeg,
} from './fleet.js';

const open: DisaggFleet[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((f) => f.close()));
});

function legOf(req: PreparedRequest, tracker: RequestTracker): LegRequest {
  return {
    requestId: req.requestId,
    path: '/v1/completions',
    body: req.body,
    stream: req.stream,
    isl: req.tokenIds.length,
    hashes: req.hashes,
    routing: req.hints,
    phase: 'aggregated',
    signal: req.signal,
    receivedAt: req.receivedAt,
    tracker,
  };
}

/** Lets every queued callback and I/O event that could run, run. */
async function settle(turns = 30): Promise<void> {
  for (let i = 0; i < turns; i++) await new Promise((r) => setImmediate(r));
}

interface AtDecodeStart {
  phase: string;
  prefillWorkerId: number | undefined;
  prefillBooked: number;
  prefillAcceptedAt: number | undefined;
  prefillAnsweredAt: number | undefined;
  decodeCalledAt: number;
}

for (const engine of ['sglang', 'vllm'] as const) {
  it(`${engine}: decode waits for the prefill's routing and dispatch${engine === 'sglang' ? ', not for its output' : ' and its answer (sync handoff)'}`, async () => {
    const f = await startDisaggFleet({ engine, prefill: 1, decode: 1 });
    open.push(f);
    const tracker = new RequestTracker(systemClock);
    const req = prepare(randomTokens(seededRng(3), 90), { requestId: `order-${engine}`, maxTokens: 5 });
    let prefillLeg: SentLeg | undefined;
    let atDecode: AtDecodeStart | undefined;
    f.rec.onCall = (leg) => {
      if (leg.role === 'prefill') prefillLeg = leg;
      else
        atDecode = {
          phase: tracker.phase,
          prefillWorkerId: tracker.workers().prefillWorkerId,
          prefillBooked: booked(f.pool()).requests,
          prefillAcceptedAt: prefillLeg?.acceptedAt,
          prefillAnsweredAt: prefillLeg?.answeredAt,
          decodeCalledAt: leg.calledAt,
        };
    };
    const release = f.rec.hold(PREFILL_ID);
    const routed = f.router.prefill.route(legOf(req, tracker));
    await until(() => prefillLeg !== undefined, 'the prefill dispatch');
    await settle();
    // Held before the socket: the prefill is routed, booked and attributed, but not dispatched, so decode may not start.
    expect(legsOf(f.rec, req.requestId).decode).toHaveLength(0);
    expect(tracker.phase).toBe('prefill');
    expect(tracker.workers().prefillWorkerId).toBe(PREFILL_ID);
    expect(booked(f.pool()).requests).toBe(1);
    release();
    const out = await routed;
    expect(atDecode).toBeDefined();
    const at = atDecode!;
    expect(at.phase).toBe('decode');
    expect(at.prefillWorkerId).toBe(PREFILL_ID);
    expect(at.prefillAcceptedAt).toBeDefined();
    expect(at.decodeCalledAt).toBeGreaterThanOrEqual(at.prefillAcceptedAt!);
    if (engine === 'sglang') {
      // Dispatched while the prefill had no answer yet (it answers only after decode connected).
      expect(at.prefillAnsweredAt).toBeUndefined();
      expect(at.prefillBooked).toBe(1);
    } else {
      expect(at.prefillAnsweredAt).toBeDefined();
      expect(at.decodeCalledAt).toBeGreaterThanOrEqual(at.prefillAnsweredAt!);
    }
    expect((await drain(out)).usage?.completion_tokens).toBe(5);
    const w = tracker.workers();
    expect(w).toMatchObject({ prefillWorkerId: PREFILL_ID, decodeWorkerId: f.decodeWorkers[0]!.id });
    expect(out.prefillWorker).toEqual({ workerId: PREFILL_ID, dpRank: 0 });
    expect(tracker.conflicts).toEqual([]);
    await until(() => legsOf(f.rec, req.requestId).prefill[0]!.answeredAt !== undefined, 'the prefill answer');
    expect(tracker.times.prefillComplete).toBeDefined();
    await until(() => booked(f.pool()).requests === 0 && booked(f.router.decode).requests === 0, 'both pools at zero');
  });
}
