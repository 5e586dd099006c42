/**
 * Other replicas' bookings in the scheduler's bookkeeping (issue 15 item 1):
 * their load adds to each slot's, a prefix in flight through two replicas
 * counts once, every op is idempotent, and a replica's bookings drop at once.
 */
import { describe, expect, it, vi } from 'vitest';
import { ManualClock, seededRng } from '../../src/common/index.js';
import { ActiveSequences, KvScheduler, type BookkeepingObserver, type SyncedBooking } from '../../src/core/index.js';
import { promptHashes } from '../../src/wasm/index.js';

const BS = 16;

function setup(config: { routerTrackOutputBlocks?: boolean } = {}): KvScheduler {
  const s = new KvScheduler({ blockSize: BS, clock: new ManualClock(0), rng: seededRng(1), config });
  s.addWorker(1);
  s.addWorker(2);
  return s;
}

function tokens(n: number, base = 0): number[] {
  return Array.from({ length: n }, (_, i) => base + i);
}

function booking(
  requestId: string,
  workerId: number,
  toks: number[],
  extra: Partial<SyncedBooking> = {},
): SyncedBooking {
  return {
    requestId,
    workerId,
    dpRank: 0,
    seq: promptHashes(toks, BS).seq,
    privateBlocks: 0,
    prefillTokens: toks.length,
    expectedOutputTokens: undefined,
    prefillCompleted: false,
    outputBlocks: 0,
    decay: undefined,
    ...extra,
  };
}

describe('PeerBookings', () => {
  it("a peer's booking moves the local decision, and freeing it moves it back", () => {
    const s = setup();
    const req = (id: string) => ({ requestId: id, isl: 64, hashes: promptHashes(tokens(64, 5000), BS) });
    expect(s.select(req('probe'), 'query').workerId).toBeDefined();
    expect(s.peers.add('b', booking('r1', 1, tokens(640)))).toBe('applied');
    expect(s.select(req('q1'), 'query').workerId).toBe(2);
    expect(s.load({ workerId: 1, dpRank: 0 })).toEqual({
      activePrefillTokens: 640,
      activeDecodeBlocks: 40,
      activeRequests: 1,
    });
    // Not the router's own requests.
    expect(s.activeRequestCount).toBe(0);
    expect(s.peers.free('b', 'r1')).toBe('applied');
    expect(s.load({ workerId: 1, dpRank: 0 })).toEqual({
      activePrefillTokens: 0,
      activeDecodeBlocks: 0,
      activeRequests: 0,
    });
  });

  it('a prompt prefix in flight through two replicas counts once on the slot', () => {
    const s = setup();
    const prompt = tokens(160);
    s.addRequest({ requestId: 'local', workerId: 1, isl: 160, hashes: promptHashes(prompt, BS) });
    expect(s.load({ workerId: 1, dpRank: 0 })!.activeDecodeBlocks).toBe(10);
    s.peers.add('b', booking('remote', 1, prompt));
    expect(s.load({ workerId: 1, dpRank: 0 })!.activeDecodeBlocks).toBe(10);
    expect(s.load({ workerId: 1, dpRank: 0 })!.activeRequests).toBe(2);
  });

  it('duplicates are harmless: a repeated add, prefill, output count or free changes nothing', () => {
    const s = new KvScheduler({ blockSize: BS, clock: new ManualClock(0), config: { routerTrackOutputBlocks: true } });
    s.addWorker(1);
    const b = booking('r1', 1, tokens(64));
    s.peers.add('b', b);
    expect(s.peers.add('b', b)).toBe('duplicate');
    expect(s.peers.prefillCompleted('b', 'r1')).toBe('applied');
    expect(s.peers.prefillCompleted('b', 'r1')).toBe('duplicate');
    expect(s.peers.outputBlocks('b', 'r1', 2, undefined)).toBe('applied');
    expect(s.peers.outputBlocks('b', 'r1', 2, undefined)).toBe('duplicate');
    expect(s.peers.outputBlocks('b', 'r1', 1, undefined)).toBe('duplicate');
    expect(s.load({ workerId: 1, dpRank: 0 })).toEqual({
      activePrefillTokens: 0,
      activeDecodeBlocks: 6,
      activeRequests: 1,
    });
    expect(s.peers.free('b', 'r1')).toBe('applied');
    expect(s.peers.free('b', 'r1')).toBe('unknown_request');
    expect(s.peers.add('b', booking('r2', 9, tokens(16)))).toBe('unknown_worker');
  });

  it("a peer's output count applies in one step: the state block-by-block progress leaves, 2^20 blocks at once", () => {
    // The same request on two schedulers, beside a peer request sharing half its prompt (so the decayed,
    // exclusive set is not the whole request): one told its output blocks one at a time, one all at once.
    const steps = setup({ routerTrackOutputBlocks: true });
    const once = setup({ routerTrackOutputBlocks: true });
    const expected = { expectedOutputTokens: 4000 };
    for (const s of [steps, once]) {
      s.peers.add('b', booking('r1', 1, tokens(640), expected));
      s.peers.add('c', booking('r2', 1, tokens(320), expected));
    }
    for (let k = 1; k <= 300; k++) steps.peers.outputBlocks('b', 'r1', k, 0.37);
    expect(once.peers.outputBlocks('b', 'r1', 300, 0.37)).toBe('applied');
    const slot = { workerId: 1, dpRank: 0 };
    expect(once.load(slot)).toEqual(steps.load(slot));
    expect(once.load(slot)!.activeDecodeBlocks).toBe(Math.round(20 + (40 - 20 + 300) * 0.37));
    // The later count with another decay: only the last decayed block's weight stays.
    steps.peers.outputBlocks('b', 'r1', 301, 0.5);
    once.peers.outputBlocks('b', 'r1', 301, 0.5);
    expect(once.load(slot)).toEqual(steps.load(slot));
    // A repeat changes nothing.
    expect(once.peers.outputBlocks('b', 'r1', 301, 0.5)).toBe('duplicate');

    // The most a peer's op may claim (protocol.ts): one step, not a million on the event loop.
    const big = setup({ routerTrackOutputBlocks: true });
    big.peers.add('b', booking('r1', 1, tokens(640), expected));
    // Counted, not timed: the bookkeeping is entered once (per block, this took 100+ ms).
    const perBlock = vi.spyOn(ActiveSequences.prototype, 'addOutputBlock');
    const perCount = vi.spyOn(ActiveSequences.prototype, 'addOutputBlocks');
    try {
      expect(big.peers.outputBlocks('b', 'r1', 1 << 20, 0.25)).toBe('applied');
      expect(perBlock.mock.calls.length + perCount.mock.calls.length).toBe(1);
    } finally {
      perBlock.mockRestore();
      perCount.mockRestore();
    }
    expect(big.load(slot)!.activeDecodeBlocks).toBe(Math.round((40 + (1 << 20)) * 0.25));
    expect(big.peers.free('b', 'r1')).toBe('applied');
    expect(big.load(slot)).toEqual({ activePrefillTokens: 0, activeDecodeBlocks: 0, activeRequests: 0 });
  });

  it("drops every booking of a replica at once, and keeps the others'", () => {
    const s = setup();
    s.peers.add('b', booking('r1', 1, tokens(32)));
    s.peers.add('b', booking('r2', 2, tokens(32, 100)));
    s.peers.add('c', booking('r1', 1, tokens(32, 200)));
    expect(s.peers.dropReplica('b')).toBe(2);
    expect(
      s.load({ workerId: 1, dpRank: 0 })!.activeRequests + s.load({ workerId: 2, dpRank: 0 })!.activeRequests,
    ).toBe(1);
    expect(s.peers.replicaCounts()).toEqual(new Map([['c', 1]]));
  });

  it("tells an observer of every change to the router's own bookings, not of peers'", () => {
    const s = new KvScheduler({ blockSize: BS, clock: new ManualClock(0), config: { routerTrackOutputBlocks: true } });
    s.addWorker(1);
    const seen: string[] = [];
    const observer: BookkeepingObserver = {
      added: (b) =>
        seen.push(`added ${b.requestId} w${b.workerId} ${b.seq?.length ?? 0} blocks ${b.prefillTokens} tokens`),
      prefillCompleted: (id) => seen.push(`prefill ${id}`),
      outputBlock: (id, n) => seen.push(`output ${id} ${n}`),
      freed: (id) => seen.push(`freed ${id}`),
    };
    s.observe(observer);
    s.select({ requestId: 'x', isl: 48, hashes: promptHashes(tokens(48), BS) });
    s.markPrefillCompleted('x');
    s.addOutputBlock('x');
    s.peers.add('b', booking('y', 1, tokens(16)));
    s.free('x');
    expect(seen).toEqual(['added x w1 3 blocks 48 tokens', 'prefill x', 'output x 1', 'freed x']);
    expect([...s.localBookings()]).toEqual([]);
  });
});
