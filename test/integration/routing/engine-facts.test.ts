/**
 * What an engine said after its worker became routable reaches the pool in place (issue 16, engine
 * introspection on join): the registry's engine facts re-register the worker with its engine's capacity and,
 * once it is found mismatched, with its KV overlap scored 0; its index entries and subscription stay, so
 * clearing the mismatch restores the overlap at once. Real mocker engines and KV events over ZMQ.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { drain, prepare, randomTokens, startFleet, type Fleet } from '../../helpers/fleet.js';
import { until } from '../../helpers/until.js';

describe('engine facts of a routable worker', () => {
  let fleet: Fleet;

  beforeAll(async () => {
    fleet = await startFleet(2);
  });

  afterAll(async () => {
    await fleet?.close();
  });

  it("capacity and KV trust follow setEngineFacts without dropping the worker's index", async () => {
    const tokens = randomTokens(seededRng(3), 128);
    await drain(await fleet.router.route(prepare(tokens, { hints: { annotations: [], backendInstanceId: 2 } })));
    const overlap = async (): Promise<number> =>
      (await fleet.router.query(prepare(tokens, { hints: { annotations: [], backendInstanceId: 2 } }))).overlapBlocks;
    await until(async () => (await overlap()) === 8, 'worker 2 indexed');

    fleet.registry.setEngineFacts(2, {
      totalKvBlocks: 777,
      kvMismatch: "its engine's block size is 32, the model's block_size is 16",
    });
    expect(await overlap()).toBe(0);
    expect(fleet.router.decode.kvRouter!.workers().find((w) => w.workerId === 2)?.totalKvBlocks).toBe(777);
    expect(fleet.registry.effective(2)?.kvMismatch).toMatch(/block size/);

    fleet.registry.setEngineFacts(2, { totalKvBlocks: 777 });
    expect(await overlap()).toBe(8);
  });
});
