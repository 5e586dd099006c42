/**
 * A worker marked down keeps its prefix-index slot and KV-event subscription in its router (real mocker engines
 * publishing KV events, an in-process ModelRouter); one that then leaves the registry loses both, as one removed
 * while routable does, and the bookings it kept while down, in KV and in a load-only mode (before, those stayed
 * held for good: its pool no longer listed it, so the leave never reached its bookkeeping). The return of a worker
 * marked down, over real processes: ./health-flap.test.ts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { drain, prepare, randomTokens, startFleet, until, type Fleet } from '../../helpers/fleet.js';

describe('a worker marked down, then removed', () => {
  let fleet: Fleet | undefined;
  afterEach(async () => {
    await fleet?.close();
    fleet = undefined;
  });

  it('keeps its index slot and subscription while down, and loses both when it leaves', async () => {
    fleet = await startFleet(2);
    const f = fleet;
    const events = f.router.events!;
    const subscribed = (id: number): boolean => events.sources().some((s) => s.workerId === id);
    const res = await f.router.route(prepare(randomTokens(seededRng(3), 64), { hints: { annotations: [] } }));
    await drain(res);
    const id = res.worker.workerId;
    await until(() => events.indexes.blockCount(id, 0) > 0, 'its stored blocks indexed');
    const held = events.indexes.blockCount(id, 0);

    f.registry.markDown(id);
    expect(f.router.decode.worker(id)).toBeUndefined();
    expect(subscribed(id)).toBe(true);
    expect(events.indexes.blockCount(id, 0)).toBe(held);

    f.registry.remove(id);
    // Its subscription closes first, then its slot goes from every tier.
    await until(() => !subscribed(id) && events.indexes.device.findSlot(id, 0) === undefined, 'its slot gone');
    expect(subscribed(3 - id)).toBe(true);
  });

  it.each(['kv', 'least-loaded'] as const)(
    'drops the bookings it kept while down when it leaves (%s)',
    async (mode) => {
      // A slow engine: the stream is still running when its worker leaves.
      fleet = await startFleet(2, { mocker: { speedup: 1 }, router: { mode } });
      const f = fleet;
      const client = new AbortController();
      const tokens = randomTokens(seededRng(4), 64);
      const res = await f.router.route(prepare(tokens, { maxTokens: 500, signal: client.signal }));
      const slot = res.worker;
      expect(f.router.decode.activeRequests(slot)).toBe(1);

      f.registry.markDown(slot.workerId);
      f.registry.remove(slot.workerId);
      // Back under the same id (as a new worker): nothing of the requests it ran before it left.
      f.registry.add(f.workers[slot.workerId - 1]!);
      expect(f.router.decode.activeRequests(slot)).toBe(0);
      expect(f.router.decode.kvRouter?.activeRequestCount ?? 0).toBe(0);
      client.abort();
      await drain(res).catch(() => undefined);
    },
  );
});
