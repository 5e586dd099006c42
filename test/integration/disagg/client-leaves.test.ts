/**
 * The client of a disaggregated request leaves at each phase, and what the
 * README's failure table promises holds: before the prefill reached an engine
 * it is cancelled and nothing else is sent; after, the prefill runs to its end
 * and decode takes its KV (failures.test.ts: during the prefill); a decode
 * under way is cancelled once it has output. Every booking of both pools (the
 * decode slot booked before the prefill included) is released each time.
 */
import { describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { KvgateError, isKvgateError } from '../../../src/errors/index.js';
import {
  booked,
  drain,
  legsOf,
  poolsAtZero,
  PREFILL_ID,
  prepare,
  randomTokens,
  fleetsPerTest,
  until,
  type DisaggFleet,
} from './fleet.js';

const fleet = fleetsPerTest();

/** The engine has no request left (running or waiting). */
const idle = (f: DisaggFleet, role: 'prefill' | 'decode'): boolean =>
  f[role].every((m) => m.stats().ranks.every((r) => r.running === 0 && r.waiting === 0));

const rng = seededRng(909);
const gone = (): KvgateError => new KvgateError('KVG_ERR_CLIENT_ABORTED', 'client went away');
const codeOf = (p: Promise<unknown>): Promise<string | undefined> =>
  p.then(
    () => undefined,
    (err: unknown) => (isKvgateError(err) ? err.code : String(err)),
  );

for (const engine of ['vllm', 'sglang'] as const) {
  describe(`${engine}: the client leaves`, () => {
    it('before the prefill reached its engine: it is cancelled, nothing is sent, nothing stays booked', async () => {
      const f = await fleet({ engine });
      const open = f.rec.hold(PREFILL_ID); // the prefill is routed and booked, held before its socket
      const ac = new AbortController();
      const routed = codeOf(
        f.router.route(prepare(randomTokens(rng, 80), { requestId: `pre-${engine}`, signal: ac.signal })),
      );
      await until(() => legsOf(f.rec, `pre-${engine}`).prefill.length === 1, 'the prefill routed');
      expect(booked(f.router.decode).requests).toBe(1); // the decode slot, booked before the prefill
      ac.abort(gone());
      expect(await routed).toBe('KVG_ERR_CLIENT_ABORTED');
      open();
      const p = legsOf(f.rec, `pre-${engine}`).prefill[0]!;
      await until(() => p.answeredAt !== undefined, 'the prefill leg to end');
      expect(isKvgateError(p.error, 'KVG_ERR_CLIENT_ABORTED')).toBe(true);
      expect(p.acceptedAt).toBeUndefined();
      expect(legsOf(f.rec, `pre-${engine}`).decode).toHaveLength(0);
      await poolsAtZero(f);
    });

    it('while queued in the prefill router: the wait is cancelled, nothing sent, nothing stays booked', async () => {
      const f = await fleet({
        engine,
        prefillWorker: { maxNumBatchedTokens: 64 },
        router: { routerConfig: { routerQueueThreshold: 1 } },
      });
      f.prefill[0]!.setFaults({ hang: true });
      const first = f.router.route(prepare(randomTokens(rng, 200), { requestId: `busy-${engine}` }));
      await until(() => legsOf(f.rec, `busy-${engine}`).prefill[0]?.acceptedAt !== undefined, 'the first prefill');
      const ac = new AbortController();
      const queued = codeOf(
        f.router.route(prepare(randomTokens(rng, 200), { requestId: `queued-${engine}`, signal: ac.signal })),
      );
      await until(() => f.pool().kvRouter!.pendingRequests === 1, 'the second prefill parked');
      ac.abort(gone());
      expect(await queued).toBe('KVG_ERR_CLIENT_ABORTED');
      expect(f.pool().kvRouter!.pendingRequests).toBe(0);
      expect(legsOf(f.rec, `queued-${engine}`).prefill).toHaveLength(0);
      expect(legsOf(f.rec, `queued-${engine}`).decode).toHaveLength(0);
      f.prefill[0]!.setFaults({ hang: false });
      expect((await drain(await first)).usage?.completion_tokens).toBe(4);
      await poolsAtZero(f);
    });

    it('mid-decode stream: the decode engine request is cancelled, both legs released', async () => {
      const f = await fleet({ engine, decodeMocker: { speedup: 2 } });
      const ac = new AbortController();
      const res = await f.router.route(
        prepare(randomTokens(rng, 80), { requestId: `mid-${engine}`, signal: ac.signal, maxTokens: 400 }),
      );
      if (res.body.kind !== 'sse') throw new Error('expected a stream');
      const it = res.body.events[Symbol.asyncIterator]();
      for (let i = 0; i < 3; i++) expect((await it.next()).done).toBe(false);
      ac.abort(gone());
      await it.return?.();
      await until(() => idle(f, 'decode'), 'the decode engine to drop the request');
      const d = f.decode[0]!.stats().ranks[0]!;
      expect(d.generationTokens).toBeLessThan(400);
      await until(() => legsOf(f.rec, `mid-${engine}`).prefill[0]!.answeredAt !== undefined, 'the prefill answer');
      expect(legsOf(f.rec, `mid-${engine}`).prefill[0]!.error).toBeUndefined();
      if (engine === 'vllm') expect(f.prefill[0]!.stats().ranks[0]!.heldRequests).toBe(0);
      else expect(f.prefill[0]!.stats().bootstrapPending).toBe(0);
      await poolsAtZero(f);
    });
  });
}

describe('the prefill pool loses its last worker while a request is parked in its queue', () => {
  it('the parked request fails at once (503 KVG_ERR_NO_WORKERS), nothing sent, nothing stays booked', async () => {
    const f = await fleet({
      engine: 'vllm',
      prefillWorker: { maxNumBatchedTokens: 64 },
      router: { routerConfig: { routerQueueThreshold: 1 } },
    });
    f.prefill[0]!.setFaults({ hang: true });
    const first = f.router.route(prepare(randomTokens(rng, 200), { requestId: 'lost-1' }));
    await until(() => legsOf(f.rec, 'lost-1').prefill[0]?.acceptedAt !== undefined, 'the first prefill');
    const parked = f.router.route(prepare(randomTokens(rng, 200), { requestId: 'lost-2' }));
    const code = codeOf(parked);
    await until(() => f.pool().kvRouter!.pendingRequests === 1, 'the second prefill parked');
    const t0 = performance.now();
    f.registry.markDown(PREFILL_ID); // health ejects the hung engine: the pool's last prefill worker
    // Before: parked until its client gave up (no slot, so never room), its decode slot booked all along.
    expect(await code).toBe('KVG_ERR_NO_WORKERS');
    expect(performance.now() - t0).toBeLessThan(2000);
    expect(legsOf(f.rec, 'lost-2').prefill).toHaveLength(0);
    expect(legsOf(f.rec, 'lost-2').decode).toHaveLength(0);
    f.prefill[0]!.setFaults({ hang: false });
    await first.then(drain, () => undefined); // the in-flight one ends however it ends
    await poolsAtZero(f);
  });
});

describe('vllm: the client leaves between the prefill answer and the decode start', () => {
  it('decode still takes the KV off the prefill engine, is cancelled at its first output, all released', async () => {
    const f = await fleet({ engine: 'vllm', decodeMocker: { speedup: 2 } });
    const open = f.rec.hold(f.decodeWorkers[0]!.id);
    const ac = new AbortController();
    const routed = codeOf(
      f.router.route(prepare(randomTokens(rng, 80), { requestId: 'between', signal: ac.signal, maxTokens: 400 })),
    );
    await until(() => legsOf(f.rec, 'between').decode.length === 1, 'the decode leg called (held)');
    expect(legsOf(f.rec, 'between').prefill[0]!.answeredAt).toBeDefined();
    ac.abort(gone());
    expect(await routed).toBe('KVG_ERR_CLIENT_ABORTED');
    open();
    const d = legsOf(f.rec, 'between').decode[0]!;
    await until(() => d.acceptedAt !== undefined, 'the decode on its engine');
    await until(() => f.prefill[0]!.stats().ranks[0]!.heldRequests === 0, 'the prefill engine to release its KV');
    await until(() => idle(f, 'decode'), 'the decode engine to drop the request');
    // Cut at its first output (whether the engine's counter shows that token depends on when the cancel lands).
    expect(f.decode[0]!.stats().ranks[0]!.generationTokens).toBeLessThan(400);
    await poolsAtZero(f);
  });
});
