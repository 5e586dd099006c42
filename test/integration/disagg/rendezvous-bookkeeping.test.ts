/**
 * After an SGLang rendezvous failure, every bookkeeping gauge and the
 * scheduler's loads of both pools are back to zero right after the failure,
 * also when the failing engine is ejected (health) while its leg is in flight.
 * (issue 13 item 15)
 */
import { afterEach, describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { isKvgateError } from '../../../src/errors/index.js';
import { until } from '../../helpers/until.js';
import { booked, prepare, randomTokens, startDisaggFleet, type DisaggFleet, nonZeroLoadGauges } from './fleet.js';

const open: DisaggFleet[] = [];
afterEach(async () => {
  for (const f of open.splice(0)) {
    for (const m of [...f.prefill, ...f.decode]) m.setFaults({ hang: false });
    await f.close();
  }
});

async function allZero(f: DisaggFleet): Promise<void> {
  const pools = [f.pool(), f.router.decode];
  await until(
    async () => {
      const loads = pools.every((p) => {
        const b = booked(p);
        return b.requests === 0 && b.inflight === 0 && b.tracked === 0 && b.queued === 0 && b.prefillTokens === 0;
      });
      const scheduler = pools.every((p) =>
        p.workers().every((w) => {
          const l = p.kvRouter?.load({ workerId: w.id, dpRank: w.dpStart });
          return (
            l === undefined || (l.activeRequests === 0 && l.activePrefillTokens === 0 && l.activeDecodeBlocks === 0)
          );
        }),
      );
      return loads && scheduler && (await nonZeroLoadGauges(f)).length === 0;
    },
    'every load gauge and scheduler load back to zero',
    3000,
  ).catch(async (err: unknown) => {
    throw new Error(`${String(err)}; non-zero gauges: ${(await nonZeroLoadGauges(f)).join(' | ')}`);
  });
}

const rng = seededRng(1315);

describe('SGLang rendezvous failure releases every booking (issue 13 item 15)', () => {
  for (const hung of ['decode', 'prefill'] as const) {
    it(`the ${hung} engine hangs (the other side's rendezvous times out): gauges and loads return to zero`, async () => {
      const f = await startDisaggFleet({
        engine: 'sglang',
        prefill: 1,
        decode: 1,
        prefillMocker: { bootstrapTimeoutMs: 300 },
      });
      open.push(f);
      f[hung][0]!.setFaults({ hang: true });
      const err = await f.router
        .route(prepare(randomTokens(rng, 3000), { requestId: `rdv-15-${hung}`, maxTokens: 100 }))
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(isKvgateError(err)).toBe(true);
      await allZero(f);
    });

    // What the health prober does to an engine that stopped answering /health: its worker leaves the pool
    // (and the scheduler) while its leg is still in flight; the leg's release must still zero its gauges.
    it(`the hung ${hung} engine is ejected while its leg is in flight: its gauges do not keep the booking`, async () => {
      const f = await startDisaggFleet({
        engine: 'sglang',
        prefill: 2,
        decode: 2,
        prefillMocker: { bootstrapTimeoutMs: 500 },
      });
      open.push(f);
      for (const m of f[hung]) m.setFaults({ hang: true });
      const routed = f.router
        .route(prepare(randomTokens(rng, 3000), { requestId: `rdv-15-eject-${hung}`, maxTokens: 100 }))
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      await until(
        () => f.rec.sent.some((l) => l.role === hung && l.acceptedAt !== undefined),
        `the ${hung} leg on its engine`,
      );
      const worker = f.rec.sent.find((l) => l.role === hung)!.workerId;
      expect((await nonZeroLoadGauges(f)).some((l) => l.includes(`worker_id="${worker}"`))).toBe(true);
      f.registry.markDown(worker);
      expect(isKvgateError(await routed)).toBe(true);
      await allZero(f);
    });
  }
});
