/**
 * The leg guard's contract on its own: what it checks per event (prefill done at the first output, output
 * blocks, the engine's cached tokens against the prediction) and its single ends (one release, one failure
 * report), with a real KvRouter's bookkeeping and the events of a fake engine stream.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/common/index.js';
import { readChunkInfo } from '../../../src/engines/index.js';
import { KvgateMetrics } from '../../../src/metrics/index.js';
import { KvRouter } from '../../../src/routing/kv-router.js';
import { LegGuard, guardedEvents } from '../../../src/routing/push/leg-guard.js';
import { PoolMetrics } from '../../../src/routing/push/pool-metrics.js';
import type { LegRequest, Selection } from '../../../src/routing/push/types.js';
import { BLOCK, FakeEngine, chunk, leg, rng, slot, usageChunk, worker } from './fake-engine.js';

/** A KvRouter with one worker and `req` booked on it, as the push router leaves a leg before dispatch. */
function booked(trackOutputBlocks = false, tokens = 64): { kv: KvRouter; req: LegRequest; sel: Selection } {
  const kv = new KvRouter({
    blockSize: BLOCK,
    clock: new ManualClock(),
    rng: rng(),
    config: { routerTrackActiveBlocks: true, routerTrackOutputBlocks: trackOutputBlocks },
  });
  kv.addWorker(1);
  const { req } = leg({}, tokens);
  const outcome = kv.schedule(req);
  if (outcome.status !== 'routed') throw new Error(`not routed: ${outcome.status}`);
  const sel: Selection = { slot: slot(1), worker: worker(1), overlapBlocks: 0, pinned: false, decision: undefined };
  return { kv, req, sel };
}

function guard(kv: KvRouter, req: LegRequest, sel: Selection, extra: { metrics?: PoolMetrics } = {}) {
  const ends = { released: 0, failures: [] as unknown[] };
  const g = new LegGuard(
    {
      clock: new ManualClock(),
      metrics: extra.metrics,
      kvRouter: kv,
      blockSize: BLOCK,
      release: () => {
        ends.released++;
        kv.free(req.requestId, sel.slot);
      },
      onError: (err) => ends.failures.push(err),
    },
    req,
    sel,
  );
  return { g, ends };
}

const info = (data: string) => readChunkInfo(JSON.parse(data));

describe('LegGuard', () => {
  it('marks the prefill done at the first output only, and releases once however often it is ended', () => {
    const { kv, req, sel } = booked();
    const { g, ends } = guard(kv, req, sel);
    expect(kv.load(slot(1))!.activePrefillTokens).toBe(64);
    g.onOutput(info(JSON.stringify({ choices: [{ index: 0, delta: { role: 'assistant' } }] })));
    // A role-only chunk carries no output: the prompt is not known to be done yet.
    expect(kv.load(slot(1))!.activePrefillTokens).toBe(64);
    g.onOutput(info(chunk('a')));
    expect(kv.load(slot(1))!.activePrefillTokens).toBe(0);
    g.onOutput(info(chunk('b')));
    g.finish(true);
    g.finish(true);
    g.finish(false);
    expect(ends.released).toBe(1);
    expect(kv.load(slot(1))?.activeRequests ?? 0).toBe(0);
  });

  it('tracks one output block per block of generated tokens when configured', () => {
    const { kv, req, sel } = booked(true, 64);
    const { g } = guard(kv, req, sel);
    // The prompt fills 4 blocks; the first token opens the 5th, the 17th the 6th.
    const blocks = (): number => kv.load(slot(1))!.activeDecodeBlocks;
    expect(blocks()).toBe(4);
    g.onOutput(info(chunk('t')));
    expect(blocks()).toBe(5);
    for (let i = 1; i < BLOCK; i++) g.onOutput(info(chunk('t')));
    expect(blocks()).toBe(5);
    g.onOutput(info(chunk('t')));
    expect(blocks()).toBe(6);
    g.finish(true);
  });

  it('reports a failure once, and the engine cached tokens against the prediction once', async () => {
    const { kv, req, sel } = booked();
    const m = new KvgateMetrics({ processMetrics: false });
    const pm = new PoolMetrics(m, 'm', 'aggregated', new Map([[1, worker(1)]]), () => undefined);
    const { g, ends } = guard(kv, req, sel, { metrics: pm });
    g.onOutput(info(chunk('a')));
    // Predicted 0 blocks cached; the engine reports 32 tokens: the router under-predicted.
    g.onOutput(info(usageChunk(1, 32, 64)));
    g.onOutput(info(usageChunk(1, 0, 64)));
    g.failed(new Error('first'));
    g.failed(new Error('second'));
    g.finish(true);
    expect(ends.failures.map((e) => (e as Error).message)).toEqual(['first']);
    const outcomes = Object.fromEntries(
      (await m.predictionExact.get()).values.map((v) => [String(v.labels.outcome), v.value]),
    );
    expect(outcomes).toEqual({ exact: 0, over: 0, under: 1 });
  });

  it('guardedEvents: a reader that leaves early cancels the engine request and releases once', async () => {
    const { kv, req, sel } = booked();
    const { g, ends } = guard(kv, req, sel);
    const engine = new FakeEngine();
    engine.script(worker(1).url, { kind: 'stream', chunks: [chunk('a'), chunk('b')], end: 'open' });
    const stream = await engine.dispatch(worker(1).url, req.path, req.body);
    if (stream.kind !== 'stream') throw new Error('not a stream');
    const it = guardedEvents(stream, g)[Symbol.asyncIterator]();
    expect((await it.next()).value.data).toBe(chunk('a'));
    await it.return!();
    expect(engine.calls[0]!.cancelled).toBe(true);
    expect(ends.released).toBe(1);
    expect(kv.load(slot(1))?.activeRequests ?? 0).toBe(0);
  });
});
