/**
 * A KV-event subscription that loses its engine's publisher for a while (a network cut between the gateway
 * and the engine, here a TCP relay in front of the mocker's PUB port) and connects again: what the engine
 * published meanwhile never reached the gateway, and the engine then stays idle, so no later batch shows the
 * hole. The gateway asks the engine's replay buffer for it on its own (a catch-up a second after the
 * reconnection), and its view of the worker's cache is whole again, without a reset.
 *
 * Runs the compiled CLI (bin/kvgate.js -> dist/), as `npm test` builds it first.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { metric } from '../../helpers/metric-sum.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';
import { until } from '../../helpers/until.js';
import { promptTraffic, startEngine, startGateway, suiteProcesses, workerOf } from './procs.js';

const WORKER_ID = 3;
const BLOCK = 16;

describe('a KV-event subscription that reconnects to an engine gone idle', () => {
  const procs = suiteProcesses('kvgate-reconnect-');
  let proxy: TcpProxy | undefined;
  afterAll(async () => proxy?.close());

  it('recovers what the engine published while it was cut off, from the replay buffer', async () => {
    const engine = await startEngine(procs, ['--kv-events-replay-port', '0', '--seed', '21']);
    const pubPort = Number(/:(\d+)$/.exec((engine.kv_events as string[])[0]!)![1]);
    proxy = await startTcpProxy(pubPort);
    // The engine's own worker entry, its events through the relay (the replay endpoint stays direct).
    const direct = workerOf(WORKER_ID, engine);
    const endpoint = `tcp://127.0.0.1:${proxy.port}`;
    const relayed = { ...direct, kv_events: { ...(direct.kv_events as object), endpoint } };
    const url = await startGateway(procs, { name: engine.model, block_size: BLOCK, workers: [relayed] });
    const traffic = promptTraffic(url, String(engine.model), { blocks: 3, blockSize: BLOCK, rng: seededRng(4) });
    const last = () => traffic.prompts.at(-1)!;
    const worker = { worker_id: String(WORKER_ID) };
    const changes = (change: string) => metric(url, 'kvgate_kv_event_connection_changes_total', { ...worker, change });
    // Warm up until the subscription is live (ZMQ slow joiner).
    await until(
      async () => {
        await traffic.complete();
        return (await traffic.overlap(last())) === 3;
      },
      "the gateway follows the engine's events",
      20_000,
    );

    await proxy.cut();
    await until(async () => (await changes('disconnected')) === 1, 'the lost connection seen', 10_000);
    await traffic.complete(); // stored on the engine, published to nobody
    await proxy.restore();
    await until(async () => (await changes('connected')) === 2, 'the connection made again', 10_000);
    // The engine is idle from now on: only the gateway's own catch-up can bring the blocks back.
    await until(async () => (await traffic.overlap(last())) === 3, 'the blocks stored while cut off indexed', 8000);
    for (const p of traffic.prompts) expect(await traffic.overlap(p)).toBe(3);
    expect(await metric(url, 'kvgate_kv_event_resets_total', worker)).toBe(0);
  }, 90_000);
});
