/**
 * Issue 4: a worker whose KV events never start falls back to approximate
 * mode for that worker alone, visibly in metrics, while its peers keep
 * routing on their engines' events.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { BLOCK, drain, prepare, randomTokens, startFleet, until, type Fleet } from '../../helpers/fleet.js';

describe('per-worker approximate fallback', () => {
  let fleet: Fleet | undefined;
  afterAll(async () => {
    await fleet?.close();
  });

  it("a worker without events is routed on the router's own records and shows as not live", async () => {
    fleet = await startFleet(2, { withoutEvents: [2] });
    const f = fleet;
    const rng = seededRng(3);
    const index = f.router.decode.kvRouter!.index;
    for (let i = 0; index.blockCount(1) === 0; i++) {
      if (i > 20) throw new Error('no events from worker 1');
      await drain(
        await f.router.route(
          prepare(randomTokens(rng, 3 * BLOCK), { hints: { annotations: [], backendInstanceId: 1 } }),
        ),
      );
      await until(() => index.blockCount(1) > 0, 'events', 300).catch(() => undefined);
    }
    f.router.tick();
    const text = await f.metrics.text();
    expect(text).toContain('kvgate_worker_kv_events_live{model="mock-model",worker_id="1",worker_type="aggregated"} 1');
    expect(text).toContain('kvgate_worker_kv_events_live{model="mock-model",worker_id="2",worker_type="aggregated"} 0');
    // A prompt served by worker 2 is remembered by the router (approximate mode), so its sequel follows it.
    const doc = randomTokens(rng, 12 * BLOCK);
    await drain(await f.router.route(prepare([...doc, 1], { hints: { annotations: [], backendInstanceId: 2 } })));
    const q = await f.router.query(prepare([...doc, 2]));
    expect(q.worker.workerId).toBe(2);
    expect(q.overlapBlocks).toBe(12);
    expect(index.blockCount(2)).toBe(0); // nothing came from worker 2's events
    const res = await f.router.route(prepare([...doc, 3]));
    expect(res.worker.workerId).toBe(2);
    const { usage } = await drain(res);
    expect(usage?.prompt_tokens_details?.cached_tokens).toBe(12 * BLOCK); // the engine agrees
  });
});
