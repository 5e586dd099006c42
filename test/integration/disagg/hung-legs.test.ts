/**
 * A disaggregated leg whose engine never answers is cut by kvgate's own
 * first-byte deadline (engine_timeouts.first_byte_timeout_ms), not left to the
 * engine client's header timeout (minutes), and every booking of both pools
 * is released: a vLLM decode that never starts (with the client there, and
 * after the client left during its prefill), an SGLang pair where neither
 * engine reaches the rendezvous and the engines' own bootstrap timeouts are
 * far away.
 */
import { describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { KvgateError, isKvgateError } from '../../../src/errors/index.js';
import { errorOf, legsOf, poolsAtZero, prepare, randomTokens, fleetsPerTest, until } from './fleet.js';

const FIRST_BYTE_MS = 1500;

const fleet = fleetsPerTest((opts) => ({
  ...opts,
  router: { legTimeouts: { firstByteMs: FIRST_BYTE_MS }, ...opts.router },
}));

const rng = seededRng(2024);

describe('vLLM: a prefill answers 200 and its decode never starts', () => {
  it('with the client there: 504 first-byte timeout within the bound, both legs released', async () => {
    const f = await fleet({ engine: 'vllm' });
    f.decode[0]!.setFaults({ hang: true });
    const t0 = performance.now();
    const e = await errorOf(f.router.route(prepare(randomTokens(rng, 80), { requestId: 'hang-d-v' })));
    expect(e.code).toBe('KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT');
    expect(e.statusCode).toBe(504);
    expect(performance.now() - t0).toBeLessThan(FIRST_BYTE_MS + 3000);
    expect(legsOf(f.rec, 'hang-d-v').prefill[0]!.error).toBeUndefined();
    await poolsAtZero(f, { gauges: true, timeoutMs: 5000 });
  });

  it('after the client left during the prefill: the one-token decode leg is cut by the first-byte deadline too', async () => {
    const f = await fleet({ engine: 'vllm' });
    const p = f.prefill[0]!;
    p.setFaults({ hang: true });
    f.decode[0]!.setFaults({ hang: true });
    const ac = new AbortController();
    const routed = f.router.route(
      prepare(randomTokens(rng, 80), { requestId: 'gone-hang-v', signal: ac.signal, maxTokens: 400 }),
    );
    const leg = (): ReturnType<typeof legsOf> => legsOf(f.rec, 'gone-hang-v');
    await until(() => leg().prefill[0]?.acceptedAt !== undefined, 'the prefill on its engine');
    ac.abort(new KvgateError('KVG_ERR_CLIENT_ABORTED', 'client went away'));
    expect((await errorOf(routed)).code).toBe('KVG_ERR_CLIENT_ABORTED');
    p.setFaults({ hang: false });
    await until(() => leg().decode[0]?.acceptedAt !== undefined, 'the one-token decode on its engine');
    expect(leg().decode[0]!.body).toMatchObject({ max_tokens: 1, stream: false });
    const sentAt = leg().decode[0]!.calledAt;
    // Before: nothing bounded it but the engine client's header timeout (300 s), the decode booking held all along.
    await until(() => leg().decode[0]!.answeredAt !== undefined, 'the hung decode leg to be cut', FIRST_BYTE_MS + 3000);
    expect(isKvgateError(leg().decode[0]!.error, 'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT')).toBe(true);
    expect(leg().decode[0]!.answeredAt! - sentAt).toBeGreaterThanOrEqual(FIRST_BYTE_MS - 50);
    await poolsAtZero(f, { gauges: true, timeoutMs: 5000 });
  });
});

describe('SGLang: neither engine reaches the rendezvous (their own bootstrap timeouts are far away)', () => {
  for (const hung of ['prefill', 'decode', 'both'] as const) {
    it(`${hung} hung: the prefill's first-byte deadline fails the request, its partner is cancelled, all released`, async () => {
      const f = await fleet({ engine: 'sglang', prefillMocker: { bootstrapTimeoutMs: 600_000 } });
      if (hung !== 'decode') f.prefill[0]!.setFaults({ hang: true });
      if (hung !== 'prefill') f.decode[0]!.setFaults({ hang: true });
      const t0 = performance.now();
      const e = await errorOf(f.router.route(prepare(randomTokens(rng, 80), { requestId: `rdv-hang-${hung}` })));
      expect(e.code).toBe('KVG_ERR_PREFILL_FAILED');
      expect(e.statusCode).toBe(502);
      expect(e.detail).toMatchObject({ workerId: 101 });
      expect(performance.now() - t0).toBeLessThan(FIRST_BYTE_MS + 3000);
      const legs = legsOf(f.rec, `rdv-hang-${hung}`);
      for (const l of [...legs.prefill, ...legs.decode])
        await until(() => l.answeredAt !== undefined, `the ${l.role} leg to end`);
      expect(legs.decode.every((d) => d.error !== undefined)).toBe(true);
      await poolsAtZero(f, { gauges: true, timeoutMs: 5000 });
    });
  }
});
