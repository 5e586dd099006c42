/**
 * A disaggregated request the decode side cannot take is refused before its
 * prefill is sent: 503 KVG_ERR_OVERLOADED, no prefill leg (so no prefill
 * engine holds KV that no decode will pull), nothing booked. A burst wider
 * than the decode side takes what it can and refuses the rest at once, rather
 * than running every prefill and failing the excess in a wave afterwards.
 */
import { describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { isKvgateError } from '../../../src/errors/index.js';
import { booked, drain, errorOf, legsOf, poolsAtZero, prepare, randomTokens, fleetsPerTest, until } from './fleet.js';

/** One decode engine of 8 KV blocks, overloaded beyond half of them: one 80-token request (5 blocks) fills it. */
const fleet = fleetsPerTest((opts) => ({
  decodeWorker: { totalKvBlocks: 8 },
  router: { routerConfig: { activeDecodeBlocksThreshold: 0.5 } },
  ...opts,
}));

const rng = seededRng(4242);

for (const engine of ['vllm', 'sglang'] as const) {
  describe(`${engine}: the decode side is overloaded`, () => {
    it('a new request gets 503 KVG_ERR_OVERLOADED with nothing sent to the prefill engine', async () => {
      const f = await fleet({ engine });
      const d = f.decode[0]!;
      d.setFaults({ hang: true }); // the first request's decode stays on the engine, its booking fills the decode side
      const first = f.router.route(prepare(randomTokens(rng, 80), { requestId: `first-${engine}`, maxTokens: 8 }));
      await until(() => legsOf(f.rec, `first-${engine}`).decode[0]?.acceptedAt !== undefined, 'the first decode');
      // The first request's bookings (SGLang: its prefill too, waiting at the rendezvous for the hung decode).
      const before = [booked(f.pool()).requests, booked(f.router.decode).requests];
      const e = await errorOf(f.router.route(prepare(randomTokens(rng, 80), { requestId: `second-${engine}` })));
      expect(e.code).toBe('KVG_ERR_OVERLOADED');
      expect(e.statusCode).toBe(503);
      // Before: the prefill ran first and only its decode was refused (vLLM: the prefill engine kept the KV).
      expect(legsOf(f.rec, `second-${engine}`).prefill).toHaveLength(0);
      expect(legsOf(f.rec, `second-${engine}`).decode).toHaveLength(0);
      expect([booked(f.pool()).requests, booked(f.router.decode).requests]).toEqual(before);
      d.setFaults({ hang: false });
      expect((await drain(await first)).usage?.completion_tokens).toBe(8);
      await poolsAtZero(f);
      if (engine === 'vllm')
        await until(() => f.prefill[0]!.stats().ranks[0]!.heldRequests === 0, 'no KV held on the prefill engine');
      else await until(() => f.prefill[0]!.stats().bootstrapPending === 0, 'no room left on the bootstrap server');
    });

    it('a burst of 6 with room for one: one is served, five are refused at once, none of their prefills sent', async () => {
      const f = await fleet({ engine });
      const ids = Array.from({ length: 6 }, (_, i) => `burst-${engine}-${i}`);
      const outcomes = await Promise.all(
        ids.map((id) =>
          f.router.route(prepare(randomTokens(rng, 80), { requestId: id, maxTokens: 8 })).then(
            async (res) => ({ id, ok: (await drain(res)).usage?.completion_tokens === 8, code: undefined }),
            (err: unknown) => ({ id, ok: false, code: isKvgateError(err) ? err.code : String(err) }),
          ),
        ),
      );
      const served = outcomes.filter((o) => o.ok);
      const refused = outcomes.filter((o) => !o.ok);
      expect(served.length).toBeGreaterThanOrEqual(1);
      expect(refused.map((o) => o.code)).toEqual(refused.map(() => 'KVG_ERR_OVERLOADED'));
      expect(served.length + refused.length).toBe(6);
      // Before: every prefill ran (6 prefill legs), and the excess failed after it.
      for (const o of refused) expect(legsOf(f.rec, o.id).prefill).toHaveLength(0);
      await poolsAtZero(f);
      if (engine === 'vllm')
        await until(() => f.prefill[0]!.stats().ranks[0]!.heldRequests === 0, 'no KV held on the prefill engine');
      else await until(() => f.prefill[0]!.stats().bootstrapPending === 0, 'no room left on the bootstrap server');
    });
  });
}
