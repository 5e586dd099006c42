/** Issue 4, point 1: the simple routing modes and direct mode over real engines. */
import { afterEach, describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { isKvgateError } from '../../../src/errors/index.js';
import type { RouterMode } from '../../../src/common/index.js';
import { drain, prepare, randomTokens, startFleet, type Fleet } from '../../helpers/fleet.js';

describe('simple and direct modes over real engines', () => {
  let fleet: Fleet | undefined;
  afterEach(async () => {
    await fleet?.close();
    fleet = undefined;
  });
  const start = async (mode: RouterMode): Promise<Fleet> =>
    (fleet = await startFleet(4, { kvEvents: false, router: { mode } }));
  const rng = seededRng(21);

  it('round-robin cycles over the workers', async () => {
    const f = await start('round-robin');
    const seen: number[] = [];
    for (let i = 0; i < 8; i++) {
      const res = await f.router.route(prepare(randomTokens(rng, 40)));
      seen.push(res.worker.workerId);
      await drain(res);
    }
    expect(seen).toEqual([1, 2, 3, 4, 1, 2, 3, 4]);
  });

  it('random spreads over every worker; power-of-two avoids the busiest', async () => {
    let f = await start('random');
    const counts = new Map<number, number>();
    for (let i = 0; i < 40; i++) {
      const res = await f.router.route(prepare(randomTokens(rng, 40)));
      counts.set(res.worker.workerId, (counts.get(res.worker.workerId) ?? 0) + 1);
      await drain(res);
    }
    expect([...counts.keys()].sort()).toEqual([1, 2, 3, 4]);
    await f.close();
    f = await start('power-of-two');
    // Hold 6 streams open on worker 1: power-of-two never picks it while any other has fewer.
    const held = await Promise.all(
      Array.from({ length: 6 }, () =>
        f.router.route(
          prepare(randomTokens(rng, 40), { maxTokens: 64, hints: { annotations: [], backendInstanceId: 1 } }),
        ),
      ),
    );
    for (let i = 0; i < 12; i++) {
      const res = await f.router.route(prepare(randomTokens(rng, 40)));
      expect(res.worker.workerId).not.toBe(1);
      await drain(res);
    }
    await Promise.all(held.map((r) => drain(r)));
    expect(f.router.decode.activeRequests({ workerId: 1, dpRank: 0 })).toBe(0);
  });

  it('direct mode dispatches to the named worker and says when none is named', async () => {
    const f = await start('direct');
    const res = await f.router.route(
      prepare(randomTokens(rng, 40), { hints: { annotations: [], backendInstanceId: 3 } }),
    );
    expect(res.worker.workerId).toBe(3);
    await drain(res);
    await expect(f.router.route(prepare(randomTokens(rng, 40)))).rejects.toSatisfy((e: unknown) =>
      isKvgateError(e, 'KVG_ERR_MISSING_WORKER_ID'),
    );
    await expect(
      f.router.route(prepare(randomTokens(rng, 40), { hints: { annotations: [], backendInstanceId: 9 } })),
    ).rejects.toSatisfy((e: unknown) => isKvgateError(e, 'KVG_ERR_UNKNOWN_WORKER'));
  });
});
