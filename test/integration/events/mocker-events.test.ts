/**
 * Issue 4, point 3, against the mocker's real ZMQ publishers: dropped batches
 * are recovered through replay, a restarted engine clears and rebuilds its
 * slot, and vLLM's two encodings and SGLang's flavour all decode.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import type { MockerInput } from '../../../src/mocker/index.js';
import { BLOCK, drain, prepare, randomTokens, startFleet, until, type Fleet } from '../../helpers/fleet.js';

const flavours: [string, MockerInput][] = [
  ['vLLM tagged arrays', { engine: 'vllm', kvEventsEncoding: 'array' }],
  ['vLLM tagged maps', { engine: 'vllm', kvEventsEncoding: 'map' }],
  ['SGLang (attn_dp_rank, signed i64 hashes)', { engine: 'sglang', kvEventsEncoding: 'array' }],
];

describe('KV events from mocker publishers', () => {
  let fleet: Fleet | undefined;
  afterEach(async () => {
    await fleet?.close();
    fleet = undefined;
  });

  for (const [name, mocker] of flavours) {
    it(`${name}: index follows the engine through drops, replay and a restart`, async () => {
      fleet = await startFleet(1, { mocker });
      const f = fleet;
      const rng = seededRng(name.length);
      const index = f.router.decode.kvRouter!.index;
      const depth = (tokens: number[]): number => {
        const m = index.findMatches(prepare(tokens).hashes.local);
        return m.count === 0 ? 0 : m.depths[0]!;
      };
      const send = async (tokens: number[]): Promise<number | undefined> => {
        const { usage } = await drain(await f.router.route(prepare(tokens)));
        return usage?.prompt_tokens_details?.cached_tokens;
      };
      // Prime until the subscription is live (ZMQ slow joiner; a missed first batch is replayed).
      for (let i = 0; index.size === 0; i++) {
        if (i > 20) throw new Error('no events');
        await send(randomTokens(rng, 3 * BLOCK));
        await until(() => index.size > 0, 'first events', 300).catch(() => undefined);
      }
      const a = randomTokens(rng, 10 * BLOCK);
      await send([...a, 1]);
      await until(() => depth(a) === 10, 'doc a');

      // Drop the next two batches on the wire: the third reveals the gap and replay fills it.
      f.mockers[0]!.setFaults({ dropNextEventBatches: 2 });
      const b = randomTokens(rng, 6 * BLOCK);
      const c = randomTokens(rng, 7 * BLOCK);
      const d = randomTokens(rng, 5 * BLOCK);
      await send([...b, 1]);
      await send([...c, 1]);
      await send([...d, 1]);
      await until(() => depth(b) === 6 && depth(c) === 7 && depth(d) === 5, 'dropped batches recovered through replay');
      expect(await f.metrics.text()).toMatch(
        /kvgate_kv_event_replays_total\{worker_id="1",dp_rank="0",outcome="recovered"\} [1-9]/,
      );

      // The engine restarts (fresh cache, sequence from 0): its old blocks must leave the index.
      await f.mockers[0]!.restart();
      const e = randomTokens(rng, 4 * BLOCK);
      for (let i = 0; depth(e) < 4; i++) {
        if (i > 20) throw new Error('no events after restart');
        // each send adds a fresh full block, so a batch (and with it restart detection) follows
        await send([...e, ...randomTokens(rng, BLOCK), i]);
        await until(() => depth(e) === 4, 'doc e after restart', 300).catch(() => undefined);
      }
      expect(depth(a)).toBe(0);
      expect(depth(b)).toBe(0);
      // The router's prediction and the engine agree again.
      expect(await send([...e, 99])).toBe(4 * BLOCK);
      expect(await f.metrics.text()).toMatch(/kvgate_kv_event_publisher_restarts_total\{worker_id="1",dp_rank="0"\} 1/);
    }, 30_000);
  }
});
