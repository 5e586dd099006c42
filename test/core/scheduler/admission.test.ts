import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng, type WorkerRank } from '../../../src/common/index.js';
import {
  KvScheduler,
  rejectionError,
  type AdmissionResult,
  type KvRouterOptions,
  type ScheduleOutcome,
  type SchedulingRequest,
} from '../../../src/core/index.js';
import { backpressureCap, queueKey } from '../../../src/core/queue.js';
import { promptHashes } from '../../../src/wasm/index.js';

const BS = 4;
/** Each worker is prefill-busy above 1.0 × 100 active prefill tokens. */
const QUEUE: KvRouterOptions = { routerQueueThreshold: 1.0 };

function scheduler(config: KvRouterOptions = QUEUE, workers = [1, 2], clock = new ManualClock()): KvScheduler {
  const s = new KvScheduler({ blockSize: BS, config, clock, rng: seededRng(3) });
  for (const w of workers) s.addWorker(w, { maxNumBatchedTokens: 100 });
  return s;
}

/** A request of `isl` tokens; `base` keeps prompts distinct. */
function req(requestId: string, isl: number, base: number, extra: Partial<SchedulingRequest> = {}): SchedulingRequest {
  const tokens = Array.from({ length: isl }, (_, i) => base + i);
  return { requestId, isl, hashes: promptHashes(tokens, BS), ...extra };
}

function routed(o: ScheduleOutcome): WorkerRank {
  if (o.status !== 'routed') throw new Error(`expected routed, got ${o.status}`);
  return o.decision;
}

function queued(o: ScheduleOutcome): Promise<AdmissionResult> {
  if (o.status !== 'queued') throw new Error(`expected queued, got ${o.status}`);
  return o.ticket.admitted;
}

/** Records the order in which tickets resolve. */
function track(order: string[], id: string, p: Promise<AdmissionResult>): Promise<AdmissionResult> {
  return p.then((r) => {
    order.push(id);
    return r;
  });
}

describe('queue keys and tiers', () => {
  it('FCFS, LCFS and WSPT keys; backpressure tier caps', () => {
    expect(queueKey('fcfs', 0, 5, 100, 0)).toBe(-5);
    expect(queueKey('fcfs', 10, 5, 100, 0)).toBe(5);
    expect(queueKey('lcfs', 0, 5, 100, 0)).toBe(5);
    expect(queueKey('wspt', 1, 0, 100, 60)).toBe(2 / 40);
    expect(queueKey('wspt', 0, 0, 100, 100)).toBe(1);
    const tiers = [
      [0, 1000],
      [100, 50],
      [1000, 5],
    ] as const;
    expect(backpressureCap(tiers, 0, 2)).toBe(2000);
    expect(backpressureCap(tiers, 99, 2)).toBe(2000);
    expect(backpressureCap(tiers, 100, 2)).toBe(100);
    expect(backpressureCap(tiers, 5000, 3)).toBe(15);
  });
});

describe('KvScheduler queue (spec 4.4)', () => {
  it('parks requests while every slot is busy and admits them in FCFS order as load drains', async () => {
    const clock = new ManualClock();
    const s = scheduler(QUEUE, [1, 2], clock);
    const a = routed(s.schedule(req('a', 200, 10_000)));
    const b = routed(s.schedule(req('b', 200, 20_000)));
    expect(new Set([a.workerId, b.workerId]).size).toBe(2);
    const order: string[] = [];
    const tickets: Promise<AdmissionResult>[] = [];
    for (const id of ['q1', 'q2', 'q3']) {
      clock.advance(1000);
      tickets.push(track(order, id, queued(s.schedule(req(id, 200, 30_000 + tickets.length * 1000)))));
    }
    expect(s.pendingRequests).toBe(3);
    expect(s.pendingIslTokens).toBe(600);
    // a's prefill completes: its worker has room for exactly one more 200-token prefill.
    expect(s.markPrefillCompleted('a')).toBe(true);
    await Promise.resolve();
    expect(s.pendingRequests).toBe(2);
    const r1 = await tickets[0]!;
    expect(r1.status).toBe('routed');
    if (r1.status === 'routed') {
      expect(r1.decision.workerId).toBe(a.workerId);
      expect(r1.decision.queuedMs).toBe(2000); // parked at t = 1 s, admitted at t = 3 s
      expect(r1.decision.booked).toBe(true);
    }
    // Freeing b admits q2; completing q1 admits q3.
    s.free('b');
    s.markPrefillCompleted('q1');
    await Promise.all(tickets);
    expect(order).toEqual(['q1', 'q2', 'q3']);
    expect(s.pendingRequests).toBe(0);
    expect(s.pendingIslTokens).toBe(0);
  });

  it('priority_jump, strict priority tiers and WSPT order the queue', async () => {
    const clock = new ManualClock();
    const s = scheduler(QUEUE, [1], clock);
    routed(s.schedule(req('busy', 200, 1)));
    const order: string[] = [];
    const all: Promise<AdmissionResult>[] = [];
    const park = (id: string, extra: Partial<SchedulingRequest> = {}): void => {
      clock.advance(1000);
      all.push(track(order, id, queued(s.schedule(req(id, 200, 1000 * (all.length + 2), extra)))));
    };
    park('plain1');
    park('plain2');
    // FCFS keys: plain1 -1, plain2 -2; jumped arrives at 3 s with a 2.5 s jump: -0.5, ahead of both.
    park('jumped', { priorityJump: 2.5 });
    park('tier', { strictPriority: 1 }); // a higher strict tier always goes first
    expect(s.pendingRequests).toBe(4);
    // Release one at a time: each completion makes room for one.
    let current = 'busy';
    for (let i = 0; i < 4; i++) {
      s.free(current);
      await Promise.resolve();
      await Promise.resolve();
      current = order[order.length - 1]!;
    }
    await Promise.all(all);
    expect(order).toEqual(['tier', 'jumped', 'plain1', 'plain2']);

    // WSPT: the request with fewer uncached tokens goes first.
    const w = scheduler({ routerQueueThreshold: 1.0, routerQueuePolicy: 'wspt' }, [7]);
    routed(w.schedule(req('busy', 200, 1)));
    const wOrder: string[] = [];
    const long = track(wOrder, 'long', queued(w.schedule(req('long', 400, 50_000))));
    const short = track(wOrder, 'short', queued(w.schedule(req('short', 120, 60_000))));
    w.free('busy');
    await Promise.resolve();
    w.markPrefillCompleted(wOrder[0]!);
    await Promise.all([long, short]);
    expect(wOrder).toEqual(['short', 'long']);
  });

  it('backpressure rejects with the typed outcome carrying queued and maximum ISL tokens; expensive requests first', () => {
    const s = scheduler(
      {
        routerQueueThreshold: 1.0,
        routerQueueByIncomingMissingIsl: [
          [0, 300],
          [150, 100],
        ],
      },
      [1, 2],
    );
    routed(s.schedule(req('a', 200, 10_000)));
    routed(s.schedule(req('b', 200, 20_000)));
    // A cheap request (100 tokens missing, tier 0: cap 300 × 2 workers) parks.
    queued(s.schedule(req('c1', 100, 30_000)));
    queued(s.schedule(req('c2', 100, 31_000)));
    // An expensive one (200 missing, tier 150: cap 100 × 2 = 200) is shed: 200 already queued.
    const o = s.schedule(req('e', 200, 40_000));
    expect(o.status).toBe('rejected');
    if (o.status !== 'rejected') return;
    expect(o.rejection).toEqual({
      kind: 'backpressure',
      reason: 'MaxQueuedIslTokensExceeded',
      queuedIslTokens: 200,
      maxQueuedIslTokens: 200,
      missingIslTokens: 200,
    });
    const err = rejectionError(o.rejection);
    expect(err.code).toBe('KVG_ERR_BACKPRESSURE');
    expect(err.statusCode).toBe(503);
    expect(err.detail).toMatchObject({ queuedIslTokens: 200, maxQueuedIslTokens: 200 });
    // Cheap requests keep queueing up to their own cap (300 × 2 = 600 queued ISL tokens).
    let k = 3;
    let last: ScheduleOutcome;
    while ((last = s.schedule(req(`c${k}`, 100, 30_000 + k * 1000))).status === 'queued') k++;
    expect(s.pendingIslTokens).toBe(600);
    expect(last).toMatchObject({
      status: 'rejected',
      rejection: { kind: 'backpressure', queuedIslTokens: 600, maxQueuedIslTokens: 600, missingIslTokens: 100 },
    });
  });

  // issue 12 item 5 (changes the earlier "a pinned request waits on its worker" on purpose): the picker upstream has decided.
  it('a pinned request to a busy worker is booked at once, never queued, with or without a rank', () => {
    const s = scheduler(QUEUE, [1, 2]);
    const onOne = routed(s.schedule(req('a', 200, 10_000, { pinWorkerId: 1 })));
    expect(onOne.workerId).toBe(1);
    // Worker 1 is prefill-busy (200 > 1.0 × 100): an unpinned request would park, a pinned one is booked there.
    for (const [id, pin] of [
      ['p', { pinWorkerId: 1, pinDpRank: 0 }],
      ['q', { pinWorkerId: 1 }],
    ] as const) {
      const o = s.schedule(req(id, 200, 20_000, pin));
      expect(o.status).toBe('routed');
      if (o.status === 'routed') expect(o.decision).toMatchObject({ workerId: 1, pinned: true });
    }
    expect(s.pendingRequests).toBe(0);
    expect(s.load({ workerId: 1, dpRank: 0 })!.activeRequests).toBe(3);
  });

  it('allowed worker lists bypass the queue; cancel withdraws', async () => {
    const s = scheduler(QUEUE, [1, 2]);
    routed(s.schedule(req('a', 200, 10_000)));
    routed(s.schedule(req('b', 200, 20_000)));
    expect(s.schedule(req('epp', 200, 30_000, { allowedWorkerIds: [1, 2] })).status).toBe('routed');
    const o = s.schedule(req('c', 200, 40_000));
    if (o.status !== 'queued') throw new Error('expected queued');
    expect(s.pendingIslTokens).toBe(200);
    expect(o.ticket.cancel()).toBe(true);
    expect(o.ticket.cancel()).toBe(false);
    expect(await o.ticket.admitted).toEqual({ status: 'cancelled' });
    expect(s.pendingRequests).toBe(0);
    // A cancelled request is never admitted later.
    s.free('a');
    expect(s.activeRequest('c')).toBeUndefined();
  });

  it("a LoRA adapter's workers (adapterRestricted) are no picker's list: the request queues in its turn", async () => {
    const s = scheduler(QUEUE, [1, 2]);
    routed(s.schedule(req('a', 200, 10_000)));
    routed(s.schedule(req('b', 200, 20_000)));
    const order: string[] = [];
    const c = track(order, 'c', queued(s.schedule(req('c', 200, 30_000))));
    const lora = { allowedWorkerIds: new Set([1, 2]), adapterRestricted: true };
    const l = track(order, 'lora', queued(s.schedule(req('lora', 200, 40_000, lora))));
    expect(s.pendingRequests).toBe(2);
    s.markPrefillCompleted('a');
    s.markPrefillCompleted('b');
    await Promise.all([c, l]);
    expect(order).toEqual(['c', 'lora']);
  });

  it('tick drains the queue after expiry frees load', async () => {
    const clock = new ManualClock();
    const s = scheduler(QUEUE, [1], clock);
    routed(s.schedule(req('lost', 200, 1)));
    const p = queued(s.schedule(req('w', 200, 5000)));
    clock.advance(300_000);
    const t = s.tick();
    expect(t.expiredRequests).toEqual(['lost']);
    expect(t.admitted).toBe(1);
    expect((await p).status).toBe('routed');
  });

  it('the last worker leaving fails every parked request (KVG_ERR_NO_WORKERS) instead of leaving it parked', async () => {
    const s = scheduler(QUEUE, [1]);
    routed(s.schedule(req('busy', 200, 1)));
    const a = queued(s.schedule(req('a', 200, 5000)));
    const b = queued(s.schedule(req('b', 200, 9000)));
    expect(s.pendingRequests).toBe(2);
    s.removeWorker(1);
    // Before: nothing could ever admit them (no slot has room when there is no slot); they waited for their client.
    for (const r of await Promise.all([a, b])) {
      expect(r.status).toBe('failed');
      if (r.status === 'failed') expect(r.error.code).toBe('KVG_ERR_NO_WORKERS');
    }
    expect(s.pendingRequests).toBe(0);
  });

  it('busy thresholds: overloaded ranks are filtered; when all are overloaded the request is rejected', () => {
    const s = new KvScheduler({
      blockSize: BS,
      config: { activeDecodeBlocksThreshold: 0.5, activePrefillTokensThreshold: 1000 },
      rng: seededRng(1),
    });
    s.addWorker(1, { totalKvBlocks: 20 });
    s.addWorker(2, { totalKvBlocks: 20 });
    // 44 tokens = 11 blocks > 0.5 × 20 on whichever worker takes it.
    const first = s.select(req('a', 44, 1));
    const second = s.select(req('b', 8, 1000));
    expect(second.workerId).not.toBe(first.workerId);
    expect(second.candidateCount).toBe(1);
    // Worker-reported KV usage counts too.
    s.reportKvUsage({ workerId: second.workerId, dpRank: 0 }, 15);
    const o = s.schedule(req('c', 8, 2000));
    expect(o).toEqual({
      status: 'rejected',
      rejection: { kind: 'overloaded', reason: 'AllWorkersOverloaded', eligibleSlots: 2 },
    });
    expect(() => s.select(req('d', 8, 3000))).toThrow(expect.objectContaining({ code: 'KVG_ERR_OVERLOADED' }));
    // issue 12 item 5: a pin to an overloaded worker is booked anyway, and a query-only pin is answered.
    expect(s.select(req('pq', 8, 5000, { pinWorkerId: first.workerId }), 'query')).toMatchObject({
      workerId: first.workerId,
      pinned: true,
    });
    expect(s.schedule(req('pb', 8, 6000, { pinWorkerId: first.workerId, pinDpRank: 0 }))).toMatchObject({
      status: 'routed',
      decision: { workerId: first.workerId },
    });
    s.free('pb');
    s.free('a');
    expect(s.select(req('e', 8, 4000)).workerId).toBe(first.workerId);
  });
});

describe('KvScheduler under random traffic', () => {
  it('every ticket resolves, load never goes negative, and all counters return to zero', async () => {
    const clock = new ManualClock();
    const rng = seededRng(77);
    const int = (n: number): number => Math.floor(rng() * n);
    const s = new KvScheduler({
      blockSize: BS,
      clock,
      rng: seededRng(8),
      config: {
        routerQueueThreshold: 1.0,
        routerQueuePolicy: 'wspt',
        routerQueueByIncomingMissingIsl: [
          [0, 2000],
          [100, 300],
        ],
        routerTrackOutputBlocks: true,
      },
    });
    for (const w of [1, 2, 3]) s.addWorker(w, { maxNumBatchedTokens: 100, dataParallelSize: 1 + (w % 2) });
    const live = new Set<string>();
    const pending: Promise<AdmissionResult>[] = [];
    const results: AdmissionResult[] = [];
    for (let step = 0; step < 1500; step++) {
      clock.advance(int(50));
      const op = rng();
      if (op < 0.4) {
        const id = `x${step}`;
        const pin = rng() < 0.15 ? { pinWorkerId: 1 + int(3) } : {};
        let o: ScheduleOutcome;
        try {
          o = s.schedule(
            req(id, 20 + int(200), int(4) * 10_000, {
              ...pin,
              priorityJump: rng() < 0.2 ? int(5) : 0,
              strictPriority: int(2),
            }),
          );
        } catch (err) {
          // A pin to a worker that was just removed, or no worker at all: typed, and nothing booked.
          expect(['KVG_ERR_UNKNOWN_WORKER', 'KVG_ERR_NO_WORKERS']).toContain((err as { code?: string }).code);
          continue;
        }
        if (o.status === 'routed') live.add(id);
        if (o.status === 'queued') {
          pending.push(
            o.ticket.admitted.then((r) => {
              results.push(r);
              if (r.status === 'routed') live.add(id);
              return r;
            }),
          );
          if (rng() < 0.1) o.ticket.cancel();
        }
      } else if (op < 0.6 && live.size > 0) {
        s.markPrefillCompleted([...live][int(live.size)]!);
      } else if (op < 0.7 && live.size > 0) {
        s.addOutputBlock([...live][int(live.size)]!, rng());
      } else if (op < 0.95 && live.size > 0) {
        const id = [...live][int(live.size)]!;
        live.delete(id);
        s.free(id);
      } else if (op < 0.97) {
        const w = 1 + int(3);
        if (s.hasWorker(w)) s.removeWorker(w);
        else s.addWorker(w, { maxNumBatchedTokens: 100 });
      } else {
        s.tick();
      }
      await Promise.resolve();
      for (const l of s.loads()) {
        expect(l.activePrefillTokens).toBeGreaterThanOrEqual(0);
        expect(l.activeDecodeBlocks).toBeGreaterThanOrEqual(0);
      }
    }
    // Drain: bring every worker back, free everything until the queue empties.
    for (const w of [1, 2, 3]) if (!s.hasWorker(w)) s.addWorker(w, { maxNumBatchedTokens: 100 });
    for (let guard = 0; guard < 10_000 && (s.pendingRequests > 0 || live.size > 0); guard++) {
      for (const id of [...live]) {
        live.delete(id);
        s.free(id);
      }
      await Promise.resolve();
      await Promise.resolve();
    }
    await Promise.all(pending);
    expect(results.length).toBe(pending.length);
    expect(s.pendingRequests).toBe(0);
    expect(s.pendingIslTokens).toBe(0);
    expect(s.activeRequestCount).toBe(0);
    for (const l of s.loads())
      expect(l).toMatchObject({ activePrefillTokens: 0, activeDecodeBlocks: 0, activeRequests: 0 });
    // The run exercised the queue: admissions and cancellations (pins are never queued, so none waits on a removed worker).
    for (const status of ['routed', 'cancelled']) expect(results.some((r) => r.status === status)).toBe(true);
  });
});
