/**
 * Issue 4, point 1: KV-aware routing against 4 real mocker engines over HTTP
 * and ZMQ. The prefix index is fed only by the engines' own KV events.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { isKvgateError } from '../../../src/errors/index.js';
import { BLOCK, drain, prepare, randomTokens, startFleet, until, type Fleet } from '../../helpers/fleet.js';

describe('kv mode over real engines and KV events', () => {
  let fleet: Fleet;
  const rng = seededRng(11);

  beforeAll(async () => {
    fleet = await startFleet(4, { mocker: { numGpuBlocks: 256 } });
    // Every worker's events must be flowing before the routing assertions:
    // prime each one with a pinned request until its index shows blocks.
    const index = fleet.router.decode.kvRouter!.index;
    for (const w of fleet.workers) {
      for (let attempt = 0; index.blockCount(w.id) === 0; attempt++) {
        if (attempt > 20) throw new Error(`no KV events from worker ${w.id}`);
        const res = await fleet.router.route(
          prepare(randomTokens(rng, 64), { hints: { annotations: [], backendInstanceId: w.id } }),
        );
        await drain(res);
        await until(() => index.blockCount(w.id) > 0, 'events', 300).catch(() => undefined);
      }
    }
  });

  afterAll(async () => {
    await fleet?.close();
  });

  it('requests sharing a long prefix land on the worker that holds it, and the prediction matches the engine', async () => {
    const doc = randomTokens(rng, 32 * BLOCK);
    const first = await fleet.router.route(prepare([...doc, ...randomTokens(rng, 5)]));
    const holder = first.worker.workerId;
    await drain(first);
    const index = fleet.router.decode.kvRouter!.index;
    await until(() => {
      const m = index.findMatches(prepare(doc).hashes.local);
      for (let i = 0; i < m.count; i++)
        if (index.slotWorker(m.slots[i]!)!.workerId === holder && m.depths[i] === 32) return true;
      return false;
    }, 'the shared prefix in the index');
    for (let i = 0; i < 6; i++) {
      const res = await fleet.router.route(prepare([...doc, ...randomTokens(rng, 7)]));
      expect(res.worker.workerId).toBe(holder);
      const { usage } = await drain(res);
      // the engine served the shared 32 blocks from its cache
      expect(usage?.prompt_tokens_details?.cached_tokens).toBe(32 * BLOCK);
    }
    const text = await fleet.metrics.text();
    expect(text).toMatch(
      /kvgate_router_prediction_total\{model="mock-model",worker_type="aggregated",outcome="exact"\} ([6-9]|\d\d)/,
    );
    // The under/over series exist at zero from the start (registered as the workers joined); they must stay there.
    expect(text).toMatch(/outcome="under"\} 0\n/);
    expect(text).toMatch(/outcome="over"\} 0\n/);
  });

  it('unrelated concurrent requests spread by load', async () => {
    const reqs = Array.from({ length: 8 }, () => prepare(randomTokens(rng, 20 * BLOCK), { maxTokens: 16 }));
    const routed = await Promise.all(reqs.map((r) => fleet.router.route(r)));
    const counts = new Map<number, number>();
    for (const r of routed) counts.set(r.worker.workerId, (counts.get(r.worker.workerId) ?? 0) + 1);
    await Promise.all(routed.map((r) => drain(r)));
    expect([...counts.values()].sort()).toEqual([2, 2, 2, 2]);
  });

  it('after the engine evicts a prefix, routing follows the eviction', async () => {
    const kv = fleet.router.decode.kvRouter!;
    const index = kv.index;
    const doc = randomTokens(rng, 24 * BLOCK);
    const docHashes = prepare(doc).hashes.local;
    const depthOn = (w: number): number => {
      const m = index.findMatches(docHashes);
      for (let i = 0; i < m.count; i++) if (index.slotWorker(m.slots[i]!)!.workerId === w) return m.depths[i]!;
      return 0;
    };
    const [a, b] = [fleet.workers[0]!.id, fleet.workers[1]!.id];
    await drain(await fleet.router.route(prepare([...doc, 1], { hints: { annotations: [], backendInstanceId: a } })));
    await until(() => depthOn(a) === 24, 'doc on worker a');
    expect((await fleet.router.query(prepare([...doc, 2]))).worker.workerId).toBe(a);
    // Flood worker a's 256-block cache with other prompts: the doc is evicted (BlockRemoved events).
    for (let i = 0; i < 16; i++) {
      await drain(
        await fleet.router.route(
          prepare(randomTokens(rng, 30 * BLOCK), { hints: { annotations: [], backendInstanceId: a } }),
        ),
      );
    }
    await until(() => depthOn(a) < 24, 'eviction of the doc on worker a');
    // Now worker b learns the doc; the router follows.
    await drain(await fleet.router.route(prepare([...doc, 3], { hints: { annotations: [], backendInstanceId: b } })));
    await until(() => depthOn(b) === 24, 'doc on worker b');
    const res = await fleet.router.route(prepare([...doc, 4]));
    expect(res.worker.workerId).toBe(b);
    await drain(res);
    expect(await fleet.metrics.text()).toMatch(
      /kvgate_kv_events_applied_total\{event_type="removed",status="ok"\} [1-9]/,
    );
  });

  it('query-only books nothing and pins are validated', async () => {
    const kv = fleet.router.decode.kvRouter!;
    const before = kv.loads().reduce((s, l) => s + l.activeRequests, 0);
    const q = await fleet.router.query(prepare(randomTokens(rng, 40)));
    expect(fleet.workers.map((w) => w.id)).toContain(q.worker.workerId);
    expect(kv.loads().reduce((s, l) => s + l.activeRequests, 0)).toBe(before);
    await expect(
      fleet.router.route(prepare([1, 2, 3], { hints: { annotations: [], backendInstanceId: 99 } })),
    ).rejects.toSatisfy((e: unknown) => isKvgateError(e, 'KVG_ERR_UNKNOWN_WORKER'));
    await expect(
      fleet.router.route(prepare([1, 2, 3], { hints: { annotations: [], backendInstanceId: 1, dpRank: 3 } })),
    ).rejects.toSatisfy((e: unknown) => isKvgateError(e, 'KVG_ERR_INVALID_DP_RANK'));
    expect(kv.loads().every((l) => l.activeRequests === 0)).toBe(true);
  });
});
