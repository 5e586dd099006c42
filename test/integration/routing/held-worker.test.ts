/**
 * A worker marked down keeps its prefix-index slot and KV-event subscription in its router (real mocker engines
 * publishing KV events, an in-process ModelRouter); one that then leaves the registry loses both, as one removed
 * while routable does. The return of a worker marked down, over real processes: ./health-flap.test.ts.
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
});
