/**
 * PushRouter against a fake engine client (a double of the HTTP transport; fake-engine.ts): the dispatcher's
 * contract is book, dispatch, free exactly once, on every path a leg can take. The selectors, the KV
 * scheduler and the guard are the real ones.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, type RoutingHints } from '../../../src/common/index.js';
import { EngineHttpError } from '../../../src/engines/index.js';
import { KvgateError, isKvgateError } from '../../../src/errors/index.js';
import { KvgateMetrics } from '../../../src/metrics/index.js';
import { makeRouterContext } from '../../../src/routing/context.js';
import { KvRouter } from '../../../src/routing/kv-router.js';
import { PushRouter } from '../../../src/routing/push/push-router.js';
import type { LegResponse } from '../../../src/routing/push/types.js';
import { BLOCK, FakeEngine, chunk, end, fail, feed, leg, rng, slot, usageChunk, worker } from './fake-engine.js';

interface Pool {
  router: PushRouter;
  engine: FakeEngine;
  metrics: KvgateMetrics;
  kv: KvRouter | undefined;
  /** requestId per call of the scheduler's `free` (kv mode). */
  frees: string[];
  /** requestId per call of `markPrefillCompleted` (kv mode). */
  prefillDone: string[];
  unreachable: number[];
}

function pool(mode: 'kv' | 'round-robin', workers = [1, 2, 3], maxRetries = 2): Pool {
  const engine = new FakeEngine();
  const metrics = new KvgateMetrics({ processMetrics: false });
  const clock = new ManualClock();
  const ctx = makeRouterContext({ clock, rng: rng(), metrics });
  const kv = mode === 'kv' ? new KvRouter({ blockSize: BLOCK, clock, rng: rng() }) : undefined;
  const frees: string[] = [];
  const prefillDone: string[] = [];
  if (kv !== undefined) {
    // Recorded on the way through: the real scheduler still does the work.
    const free = kv.free.bind(kv);
    kv.free = (...a) => (frees.push(a[0]), free(...a));
    const done = kv.markPrefillCompleted.bind(kv);
    kv.markPrefillCompleted = (id) => (prefillDone.push(id), done(id));
  }
  const unreachable: number[] = [];
  const router = new PushRouter(
    {
      model: 'm',
      role: 'aggregated',
      mode,
      blockSize: BLOCK,
      kvRouter: kv,
      engine: engine.client,
      maxRetries,
      onWorkerUnreachable: (id) => unreachable.push(id),
    },
    ctx,
  );
  for (const id of workers) {
    kv?.addWorker(id);
    router.addWorker(worker(id));
  }
  return { router, engine, metrics, kv, frees, prefillDone, unreachable };
}

/** Nothing booked anywhere: the router's in-flight count, every slot's active requests, the scheduler's load. */
function expectIdle(p: Pool, workers = [1, 2, 3]): void {
  expect(p.router.inflight).toBe(0);
  for (const w of workers) {
    expect(p.router.activeRequests(slot(w))).toBe(0);
    if (p.kv !== undefined) expect(p.kv.load(slot(w))?.activeRequests ?? 0).toBe(0);
  }
}

async function drain(res: LegResponse): Promise<string[]> {
  if (res.body.kind !== 'sse') throw new Error('not a stream');
  const out: string[] = [];
  for await (const ev of res.body.events) out.push(ev.data);
  return out;
}

async function rejection(p: Promise<unknown>): Promise<KvgateError> {
  try {
    await p;
  } catch (err) {
    if (isKvgateError(err)) return err;
    throw err;
  }
  throw new Error('expected a rejection');
}

const unreachableError = (): KvgateError =>
  new KvgateError('KVG_ERR_ENGINE_UNREACHABLE', 'connect ECONNREFUSED', { worker: 'w' });

const retries = async (p: Pool): Promise<number> =>
  (await p.metrics.retries.get()).values.reduce((a, v) => a + v.value, 0);

describe('PushRouter: book, dispatch, free exactly once', () => {
  it('a streamed leg that ends normally: booked while it runs, prefill done at the first token, freed once', async () => {
    const p = pool('kv');
    const { req } = leg();
    for (const w of [1, 2, 3]) p.engine.script(worker(w).url, { kind: 'stream', chunks: [], end: 'open' });
    const res = await p.router.dispatch(req);
    const w = res.selection.worker.id;
    expect(p.router.inflight).toBe(1);
    expect(p.router.activeRequests(slot(w))).toBe(1);
    expect(p.kv!.load(slot(w))!.activeRequests).toBe(1);
    expect(p.prefillDone).toEqual([]);
    const stream = p.engine.calls[0]!.stream!;
    feed(stream, [chunk('a')]);
    const reading = drain(res);
    await new Promise((r) => setImmediate(r));
    expect(p.prefillDone).toEqual([req.requestId]);
    feed(stream, [chunk('b'), usageChunk(2, 0, 64), '[DONE]']);
    end(stream);
    const events = await reading;
    // The usage-only chunk kvgate asked for on the client's behalf is watched, not passed on; the [DONE] read
    // with it still is (it was dropped with it before).
    expect(events).toEqual([chunk('a'), chunk('b'), '[DONE]']);
    expect(p.frees).toEqual([req.requestId]);
    expect(p.prefillDone).toEqual([req.requestId]);
    expectIdle(p);
  });

  it('a failure before the first byte is retried on another worker: counted, the first booking freed, the retry booked', async () => {
    const p = pool('kv');
    p.engine.script(worker(1).url, { kind: 'throw', error: unreachableError });
    p.engine.script(worker(2).url, { kind: 'throw', error: unreachableError });
    p.engine.script(worker(3).url, { kind: 'stream', chunks: [chunk('x'), '[DONE]'], end: 'done' });
    const { req } = leg();
    // Worker 1 holds the whole prompt and worker 2 half of it: the router tries 1, then 2, then 3.
    p.kv!.index.applyStored(1, 0, null, req.hashes.seq, req.hashes.local);
    p.kv!.index.applyStored(2, 0, null, req.hashes.seq.subarray(0, 2), req.hashes.local.subarray(0, 2));
    const res = await p.router.dispatch(req);
    expect(res.selection.worker.id).toBe(3);
    expect(p.engine.calls.map((c) => c.url)).toEqual([1, 2, 3].map((w) => worker(w).url));
    expect(p.unreachable).toEqual([1, 2]);
    expect(await retries(p)).toBe(2);
    // Both failed attempts' bookings went back; the retry's is held until its stream is read.
    expect(p.frees).toEqual([req.requestId, req.requestId]);
    expect(p.router.activeRequests(slot(3))).toBe(1);
    expect(p.router.inflight).toBe(1);
    await drain(res);
    expect(p.frees).toEqual([req.requestId, req.requestId, req.requestId]);
    expectIdle(p);
  });

  it('retries exhausted: the client hears the engine failure, every booking freed', async () => {
    const p = pool('round-robin', [1, 2, 3], 1);
    for (const w of [1, 2, 3]) p.engine.script(worker(w).url, { kind: 'throw', error: unreachableError });
    const err = await rejection(p.router.dispatch(leg().req));
    expect(err.code).toBe('KVG_ERR_ENGINE_UNREACHABLE');
    expect(p.engine.calls).toHaveLength(2);
    expect(await retries(p)).toBe(1);
    expectIdle(p);
  });

  it('no worker left to retry on: the failure that made us try, not an empty pool', async () => {
    const p = pool('round-robin', [1], 3);
    p.engine.script(worker(1).url, { kind: 'throw', error: unreachableError });
    const err = await rejection(p.router.dispatch(leg().req));
    expect(err.code).toBe('KVG_ERR_ENGINE_UNREACHABLE');
    expectIdle(p, [1]);
  });

  it('a pinned request is not retried', async () => {
    const p = pool('kv');
    p.engine.script(worker(2).url, { kind: 'throw', error: unreachableError });
    const routing: RoutingHints = { backendInstanceId: 2 };
    const err = await rejection(p.router.dispatch(leg({ routing }).req));
    expect(err.code).toBe('KVG_ERR_ENGINE_UNREACHABLE');
    expect(p.engine.calls.map((c) => c.url)).toEqual([worker(2).url]);
    expect(await retries(p)).toBe(0);
    expect(p.frees).toHaveLength(1);
    expectIdle(p);
  });

  it('a failure after the first byte (migration off) reaches the reader; not retried, freed once', async () => {
    const p = pool('kv');
    for (const w of [1, 2, 3]) p.engine.script(worker(w).url, { kind: 'stream', chunks: [chunk('a')], end: 'open' });
    const { req } = leg();
    const res = await p.router.dispatch(req);
    const reading = drain(res);
    fail(p.engine.calls[0]!.stream!, new KvgateError('KVG_ERR_ENGINE_STREAM_BROKEN', 'the engine reset the stream'));
    const err = await rejection(reading);
    expect(err.code).toBe('KVG_ERR_ENGINE_STREAM_BROKEN');
    expect(p.engine.calls).toHaveLength(1);
    expect(p.frees).toEqual([req.requestId]);
    expectIdle(p);
  });

  it('a client gone before dispatch: nothing is sent, nothing stays booked', async () => {
    const p = pool('kv');
    for (const w of [1, 2, 3]) p.engine.script(worker(w).url, { kind: 'stream', chunks: [], end: 'done' });
    const { req, cancel } = leg();
    cancel.abort(new Error('client left'));
    const err = await rejection(p.router.dispatch(req));
    expect(err.code).toBe('KVG_ERR_CLIENT_ABORTED');
    expect(p.engine.calls).toHaveLength(0);
    expectIdle(p);
  });

  it('a client gone while a preselected leg waits: its booking is released, not leaked', async () => {
    const p = pool('kv');
    for (const w of [1, 2, 3]) p.engine.script(worker(w).url, { kind: 'stream', chunks: [], end: 'done' });
    const { req, cancel } = leg();
    const sel = await p.router.select(req, 'book');
    expect(p.router.activeRequests(sel.slot)).toBe(1);
    cancel.abort(new Error('client left'));
    const err = await rejection(p.router.dispatch(req, sel));
    expect(err.code).toBe('KVG_ERR_CLIENT_ABORTED');
    expect(p.frees).toEqual([req.requestId]);
    expectIdle(p);
  });

  it('a client gone mid-stream (the reader returns early): the engine request is cancelled, the booking freed once', async () => {
    const p = pool('kv');
    for (const w of [1, 2, 3])
      p.engine.script(worker(w).url, { kind: 'stream', chunks: [chunk('a'), chunk('b')], end: 'open' });
    const { req } = leg();
    const res = await p.router.dispatch(req);
    if (res.body.kind !== 'sse') throw new Error('not a stream');
    const it = res.body.events[Symbol.asyncIterator]();
    expect((await it.next()).done).toBe(false);
    await it.return!();
    expect(p.engine.calls[0]!.cancelled).toBe(true);
    expect(p.frees).toEqual([req.requestId]);
    expectIdle(p);
  });

  it('a JSON answer: read through the guard at once and freed before it is returned', async () => {
    const p = pool('kv');
    const json = {
      id: 'cmpl-1',
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 64, completion_tokens: 1, total_tokens: 65 },
    };
    for (const w of [1, 2, 3]) p.engine.script(worker(w).url, { kind: 'json', json });
    const { req } = leg({ stream: false, path: '/v1/embeddings' });
    const res = await p.router.dispatch(req);
    expect(res.body.kind).toBe('json');
    expect(p.frees).toEqual([req.requestId]);
    expectIdle(p);
  });

  it('an engine 4xx is the client answer: not retried, freed once', async () => {
    const p = pool('kv');
    const body = Buffer.from(JSON.stringify({ object: 'error', message: 'max_tokens is too large', code: 400 }));
    for (const w of [1, 2, 3])
      p.engine.script(worker(w).url, {
        kind: 'throw',
        error: () => new EngineHttpError({ worker: worker(w).url, path: '/v1/chat/completions' }, 400, {}, body, false),
      });
    const { req } = leg();
    const res = await p.router.dispatch(req);
    expect(res.status).toBe(400);
    expect(res.body.kind).toBe('json');
    expect(JSON.stringify(res.body.kind === 'json' ? res.body.json : null)).not.toContain('engine-');
    expect(p.engine.calls).toHaveLength(1);
    expect(await retries(p)).toBe(0);
    expect(p.frees).toEqual([req.requestId]);
    expectIdle(p);
  });

  it('a worker removed while its leg runs: the leg ends normally and its booking is still returned once', async () => {
    const p = pool('round-robin');
    for (const w of [1, 2, 3]) p.engine.script(worker(w).url, { kind: 'stream', chunks: [chunk('a')], end: 'open' });
    const { req } = leg();
    const res = await p.router.dispatch(req);
    const w = res.selection.worker.id;
    p.router.removeWorker(w);
    expect(p.router.size).toBe(2);
    const reading = drain(res);
    feed(p.engine.calls[0]!.stream!, ['[DONE]']);
    end(p.engine.calls[0]!.stream!);
    await reading;
    expect(p.router.inflight).toBe(0);
    expectIdle(
      p,
      [1, 2, 3].filter((x) => x !== w),
    );
  });

  it('many legs in any order of ending: load returns to zero', async () => {
    const p = pool('kv');
    for (const w of [1, 2, 3]) p.engine.script(worker(w).url, { kind: 'stream', chunks: [chunk('a')], end: 'open' });
    const legs = await Promise.all(Array.from({ length: 12 }, () => p.router.dispatch(leg().req)));
    expect(p.router.inflight).toBe(12);
    const reads = legs.map((l) => drain(l).catch((e: unknown) => e));
    p.engine.calls.forEach((c, i) => {
      if (i % 3 === 0) fail(c.stream!, new KvgateError('KVG_ERR_ENGINE_STREAM_BROKEN', 'reset'));
      else {
        feed(c.stream!, ['[DONE]']);
        end(c.stream!);
      }
    });
    await Promise.all(reads);
    expect(p.frees).toHaveLength(12);
    expect(new Set(p.frees).size).toBe(12);
    expectIdle(p);
  });
});
